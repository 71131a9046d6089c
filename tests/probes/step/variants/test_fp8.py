"""float8-frozen (probes.step.variants.fp8): a frozen projection's two GEMMs in e4m3 from copies made once, no
weight-gradient GEMM, through torch's own `_scaled_mm` (which runs on a CPU too), and its wiring into a LoRA step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from probes.result import FieldError
from probes.step.train import contract
from probes.step.variants import catalog, fp8, libvariants, settings, stacks, worker
from tests.probes.step.variants.test_candidates import _first_gradient, _spec


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().float() - b.detach().float()).norm() / b.detach().float().norm())


@pytest.mark.parametrize("rows", [32, 37])  # 37: padded up to 48 rows for the GEMM, cut back after
def test_the_frozen_linear_matches_bf16_within_e4m3_rounding_and_computes_no_weight_gradient(rows, monkeypatch):
    torch.manual_seed(0)
    linear = nn.Linear(64, 48, bias=True).to(torch.bfloat16).requires_grad_(False)
    x = torch.randn(rows, 64, dtype=torch.bfloat16, requires_grad=True)
    ref = linear(x)
    ref.float().pow(2).sum().backward()
    ref_grad, x.grad = x.grad.clone(), None

    calls = []
    real = torch._scaled_mm
    monkeypatch.setattr(torch, "_scaled_mm", lambda *a, **k: calls.append(a[0].shape) or real(*a, **k))
    frozen = fp8.FrozenFloat8Linear(linear)
    y = frozen(x.reshape(1, rows, 64)).reshape(rows, 48)  # a (batch, seq, hidden) input keeps its leading shape
    y.float().pow(2).sum().backward()
    assert y.dtype is torch.bfloat16 and frozen.weight.dtype is fp8.E4M3 and frozen.weight.grad is None
    assert len(calls) == 2  # the forward's and the input gradient's: no weight-gradient GEMM
    assert all(shape[0] % fp8.ROWS == 0 for shape in calls)
    # e4m3 keeps 3 mantissa bits: products round to ~6%, a sum of 64 of them to a few percent (bf16: < 1%)
    assert 1e-3 < _rel(y, ref) < 0.06 and 1e-3 < _rel(x.grad, ref_grad) < 0.08


def test_rowwise_scales_keep_an_all_zero_row_and_the_row_maximum():
    t = torch.tensor([[0.0, 0.0], [1.0, -1000.0]])
    q, scale = fp8.rowwise(t)
    assert scale[0, 0] == 1.0 and torch.equal(q[0].float(), torch.zeros(2))
    assert float(q[1, 1].float() * scale[1, 0]) == pytest.approx(-1000.0)


def test_float8_frozen_converts_the_base_projections_of_a_lora_step_and_trains(tiny):
    spec = _spec(tiny, "float8-frozen")
    pieces = spec.variant.contract(contract.resolve(__import__("benchmarks.harness_plain").harness_plain))
    model = worker.build(spec, pieces, catalog.BASELINE_VARIANT, torch.device("cpu"))
    targets = libvariants.float8_targets(model)
    assert libvariants.not_applicable(spec.variant, torch.device("cpu"), "qwen3") is None
    changes = libvariants.prepare_adapted(model, spec.variant)
    assert changes == {"float8-frozen": f"{len(targets)} base projections in e4m3, quantized once (row-wise scales)"}
    converted = sorted(n for n, m in model.named_modules() if isinstance(m, fp8.FrozenFloat8Linear))
    assert converted == sorted(targets) and not any("lora_" in n for n in converted)
    step = worker.make_step(spec, model, pieces, 1024, torch.device("cpu"))
    grads = _first_gradient(step, model)
    assert grads and all("lora_" in n for n in grads)  # the adapters alone train
    assert all(torch.isfinite(g).all() for g in grads.values()) and any(g.abs().sum() > 0 for g in grads.values())


def test_float8_frozen_names_refusals_and_settings():
    with pytest.raises(FieldError, match="float8 and float8-frozen conflict"):
        stacks.get("float8+float8-frozen")
    stack = stacks.get("compile+float8-frozen")
    assert stack.float8_frozen and stack.compile and not stack.float8
    assert any("probes.step.variants.fp8.convert" in line for line in settings.lines("float8-frozen"))
    assert libvariants.float8_refusal((8, 0)).endswith("this card is 8.0")
    # compiled on CUDA, its backward GEMM was lost (H100): refused before the card is asked anything
    cuda = torch.device("cuda")
    assert libvariants.not_applicable(stack, cuda, "qwen3") == libvariants.COMPILED_FLOAT8_FROZEN
    winner = stacks.get("bf16-autocast+compile+float8-frozen+fused-adamw")
    assert libvariants.not_applicable(winner, cuda, "qwen3") == libvariants.COMPILED_FLOAT8_FROZEN
    assert libvariants.not_applicable(stack, torch.device("cpu"), "qwen3") is None  # compiled equals eager there
