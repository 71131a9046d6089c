"""Issue 41's candidates of the step (bf16-autocast, liger, micro-batch=N, float8, cuda-graphs): each one's name and
wiring, its refusal, and its `not applicable` row. liger and float8 use libraries the project does not depend
on: their wiring tests run where liger-kernel / torchao are importable, and their `install X` rows where they are
not (CI has neither: the rows; a machine with them: the wiring)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from probes.carrier import probe as carrier
from probes.result import FieldError
from probes.step import harness as reference
from probes.step.train import contract
from probes.step.variants import catalog, libvariants, settings, stacks, worker
from probes.step.variants.measurement import Spec

ROOT = Path(__file__).resolve().parents[4]
STEP = dict(weights="random", lora_rank=4, seq_len=16, warmup_steps=1, steps=2, max_steps=2, device="cpu")
HAS_TORCHAO = importlib.util.find_spec("torchao") is not None
HAS_LIGER = importlib.util.find_spec("liger_kernel") is not None


def test_the_new_names_are_canonical_compose_and_conflict_by_piece():
    assert stacks.canonical("micro-batch=02 + compile") == "compile+micro-batch=2"
    graphs = stacks.get("cuda-graphs+compile")
    assert graphs.compile and graphs.compile_mode == "reduce-overhead" and graphs.name == "compile+cuda-graphs"
    assert stacks.get("float8+compile").float8 and stacks.get("float8+compile").compile
    full = stacks.get("bf16-autocast+compile+fused-adamw+micro-batch=1")
    assert full.autocast_dtype == "bfloat16" and full.adapter_dtype == "float32" and full.micro_batch == 1
    # dtypes by name (a plan is checked without torch), torch's where the step runs; a lab's torch.dtype is named
    assert catalog.torch_dtype(full.autocast_dtype) is torch.bfloat16 and catalog.torch_dtype(None) is None
    assert catalog.Variant("lab", "a lab's", adapter_dtype=torch.bfloat16).adapter_dtype == "bfloat16"
    with pytest.raises(FieldError, match="autocast_dtype 'bf16' is not one of bfloat16, float16, float32"):
        catalog.Variant("lab", "a lab's", autocast_dtype="bf16")
    import pickle

    # a Variant unpickled elsewhere (its KEEP an equal string, not the object) keeps the harness's autocast, and stacks
    unpickled = pickle.loads(pickle.dumps(catalog.get("compile")))
    base = contract.resolve(reference)
    assert unpickled.contract(base).autocast_dtype == base.autocast_dtype
    assert stacks.compose("bf16-autocast+compile").autocast_dtype == "bfloat16"
    with pytest.raises(FieldError, match="micro-batch=1 and micro-batch=2 conflict: both set the micro-batch"):
        stacks.get("micro-batch=1+micro-batch=2")
    with pytest.raises(FieldError, match="at least one row"):
        stacks.get("micro-batch=0")
    with pytest.raises(FieldError, match="micro-batch=N"):  # the unknown name's message lists it among the known
        stacks.get("micro-batches=2")
    assert "float8" in catalog.known() and "cuda-graphs" in catalog.known()


def test_each_new_candidate_has_its_settings_line():
    lines = settings.lines("cuda-graphs+float8+micro-batch=2")
    assert any('mode="reduce-overhead"' in line for line in lines)
    assert any("convert_to_float8_training" in line and ".base_layer" in line for line in lines)
    assert any("per_device_train_batch_size=2" in line and "gradient_accumulation_steps" in line for line in lines)


@pytest.mark.parametrize(
    ("name", "batch_size", "why"),
    [
        ("cuda-graphs", 2, "not applicable: cuda-graphs needs CUDA"),
        ("compile+cuda-graphs", 2, "not applicable: cuda-graphs needs CUDA"),
        ("micro-batch=2", 2, "not applicable: micro-batch=2 holds the whole step of 2 row(s)"),
        ("micro-batch=3", 4, "not applicable: micro-batch=3 does not divide the step's 4 rows"),
        ("micro-batch=2", None, "not applicable: micro-batch=2 splits a step's rows"),
        ("micro-batch=1", 4, None),
        ("bf16-autocast+compile+fused-adamw", 1, None),
    ],
)
def test_not_applicable_on_this_cpu_says_why(name, batch_size, why):
    got = libvariants.not_applicable(stacks.get(name), torch.device("cpu"), "qwen3", batch_size)
    assert got == why if why is None else got.startswith(why), got


def test_a_missing_library_is_named_before_the_device():
    cpu = torch.device("cpu")
    float8 = libvariants.not_applicable(catalog.FIXED["float8"], cpu, "qwen3")
    liger = libvariants.not_applicable(catalog.FIXED["liger"], cpu, "qwen3")
    assert float8 == ("not applicable: float8 needs CUDA" if HAS_TORCHAO else "not applicable: install torchao") or (
        HAS_TORCHAO and float8.startswith("not applicable: float8 needs CUDA")
    )
    assert liger == (
        "not applicable: liger-kernel's Triton kernels need a CUDA device"
        if HAS_LIGER
        else "not applicable: install liger-kernel"
    )


@pytest.mark.parametrize(("capability", "refused"), [((8, 0), True), ((8, 6), True), ((8, 9), False), ((9, 0), False),
                                                     ((12, 1), False)])  # fmt: skip
def test_float8_is_refused_below_compute_capability_8_9_naming_the_card(capability, refused):
    why = libvariants.float8_refusal(capability)
    if refused:
        assert why == (
            "not applicable: float8 matmuls need compute capability 8.9 or more (H100/H200, GB10); "
            f"this card is {capability[0]}.{capability[1]}"
        )
    else:
        assert why is None


def _spec(checkpoint: Path, variant: str, batch_size: int = 2) -> Spec:
    return Spec(checkpoint=str(checkpoint), harness="probes.step.harness", lora_alpha=8.0, ce_chunk=1024,
                batch_size=batch_size, variant=stacks.get(variant), **STEP)  # fmt: skip


def test_micro_batches_split_the_same_rows_and_accumulate_the_same_gradient(tiny):
    """micro-batch=1 over a 2-row step: two micro-batches of one row each, the rows of the one batch, and one
    optimizer step whose gradient is the whole batch's (the mean over every labelled token), to rounding."""
    grads = {}
    for name in ("baseline", "micro-batch=1"):
        spec = _spec(tiny, name)
        pieces = spec.variant.contract(contract.resolve(__import__("benchmarks.harness_plain").harness_plain))
        model = worker.build(spec, pieces, spec.variant, torch.device("cpu"))
        step = worker.make_step(spec, model, pieces, 1024, torch.device("cpu"))
        grads[name] = _first_gradient(step, model)
        if name == "micro-batch=1":
            assert [b["input_ids"].shape[0] for b in step.micro_batches] == [1, 1]
            whole = worker.make_step(_spec(tiny, "baseline"), model, pieces, 1024, torch.device("cpu")).micro_batches
            assert torch.equal(torch.cat([b["input_ids"] for b in step.micro_batches]), whole[0]["input_ids"])
    for key, base in grads["baseline"].items():
        assert torch.allclose(grads["micro-batch=1"][key], base, rtol=1e-4, atol=1e-7), key
    assert any(g.abs().sum() > 0 for g in grads["baseline"].values())


def _first_gradient(step, model) -> dict[str, torch.Tensor]:
    """The adapter gradients of one step, taken just before the optimizer applies them."""
    names = {id(p): n for n, p in model.named_parameters()}
    grads: dict[str, torch.Tensor] = {}

    def grab(optimizer, *_):
        for group in optimizer.param_groups:
            for p in group["params"]:
                grads[names[id(p)]] = p.grad.detach().clone()

    handle = step.optimizer.register_step_pre_hook(grab)
    step()
    handle.remove()
    return grads


@pytest.fixture(scope="module")
def candidates_run(tiny):
    """The new candidates through carrier on the CPU, each in its own process, with their numerics price."""
    return carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            **STEP,
            batch_size=2,
            harness="benchmarks.harness_plain",
            processes=1,
            numerics_steps=4,
            variant=(
                "micro-batch=1",
                "bf16-autocast",
                "float8",
                "cuda-graphs",
                "micro-batch=2",
                "liger",
                "float8-frozen",
            ),
        )
    )


def test_the_candidates_measure_or_say_why_not_each_with_its_numerics_row(candidates_run):
    rows = {r.variant: r for r in candidates_run.tables["carriers"]}
    assert rows["micro-batch=1"].step_s > 0 and rows["bf16-autocast"].step_s > 0
    assert rows["cuda-graphs"].status.startswith("not applicable: cuda-graphs needs CUDA")
    assert rows["micro-batch=2"].status.startswith("not applicable: micro-batch=2 holds the whole step")
    assert rows["float8"].status == (
        "not applicable: float8 needs CUDA, a card of compute capability 8.9 or more (H100/H200, GB10)"
        if HAS_TORCHAO
        else "not applicable: install torchao"
    )
    assert rows["liger"].status.startswith("not applicable: ")
    assert {c.name: c for c in candidates_run.checks}["all_measured"].ok
    numerics = {r.variant: r for r in candidates_run.tables["numerics"]}
    # the same tokens per optimizer step: the accumulated gradient is the batch's, so the curve is the baseline's
    accumulated = numerics["micro-batch=1"]
    assert accumulated.within_tolerance and accumulated.grad_cosine > 0.9999 and accumulated.loss_first_diff_pct < 1e-3
    assert accumulated.rounded_away_pct == pytest.approx(numerics["baseline"].rounded_away_pct, abs=1e-6)
    # bf16 autocast over fp32 adapters (harness_plain has none): bf16 matmuls, fp32 master weights kept
    autocast = numerics["bf16-autocast"]
    assert autocast.within_tolerance and autocast.loss_first_diff_pct > 0  # it changes the arithmetic, within bounds
    assert numerics["float8"].basis.startswith("not measured: not applicable")
    # labprobe's own float8 runs on a CPU too (torch's _scaled_mm): measured and priced like any change
    assert rows["float8-frozen"].step_s > 0 and numerics["float8-frozen"].grad_cosine is not None
    assert numerics["float8-frozen"].loss_first_diff_pct > 0  # e4m3 GEMMs change the arithmetic


def test_graph_breaks_are_counted_from_dynamos_counters():
    torch._dynamo.reset()
    before, _ = worker._graph_breaks()

    def broken(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    compiled = torch.compile(broken, backend="eager")
    assert torch.equal(compiled(torch.ones(3)), torch.full((3,), 3.0))
    count, reasons = worker._graph_breaks()
    assert count == before + 1 and reasons and "graph_break" in " ".join(reasons).lower()


@pytest.mark.skipif(not HAS_TORCHAO, reason="float8's wiring needs torchao (its `install torchao` row is tested)")
def test_float8_converts_the_frozen_base_projections_only_and_trains(tiny):
    from torchao.float8.float8_linear import Float8Linear

    spec = _spec(tiny, "float8")
    pieces = spec.variant.contract(contract.resolve(__import__("benchmarks.harness_plain").harness_plain))
    model = worker.build(spec, pieces, catalog.BASELINE_VARIANT, torch.device("cpu"))
    targets = libvariants.float8_targets(model)
    assert targets and all(t.endswith(".base_layer") for t in targets)
    changes = libvariants.prepare_adapted(model, spec.variant, emulate=True)  # emulated: no fp8 GEMM on a CPU
    assert changes == {"float8": f"{len(targets)} base projections converted (torchao Float8Linear, tensorwise scales)"}
    converted = [n for n, m in model.named_modules() if isinstance(m, Float8Linear)]
    assert converted == targets  # every base projection, no adapter, no lm_head
    assert not any(isinstance(m, Float8Linear) for n, m in model.named_modules() if "lora_" in n)
    step = worker.make_step(spec, model, pieces, 1024, torch.device("cpu"))
    grads = _first_gradient(step, model)
    assert all(torch.isfinite(g).all() for g in grads.values()) and any(g.abs().sum() > 0 for g in grads.values())


@pytest.mark.skipif(not HAS_TORCHAO, reason="float8's refusal inside the build needs torchao")
def test_float8_without_a_projection_of_multiples_of_16_is_not_applicable(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(hidden_size=24, intermediate_size=40, num_attention_heads=2, num_key_value_heads=1, head_dim=12,
                vocab_size=64, num_hidden_layers=1, tie_word_embeddings=True).save_pretrained(tmp_path)  # fmt: skip
    spec = _spec(tmp_path, "float8")
    pieces = spec.variant.contract(contract.resolve(__import__("benchmarks.harness_plain").harness_plain))
    model = worker.build(spec, pieces, catalog.BASELINE_VARIANT, torch.device("cpu"))
    with pytest.raises(catalog.NotApplicable, match="no frozen base projection with both dimensions multiples of 16"):
        libvariants.prepare_adapted(model, spec.variant, emulate=True)


LIGER_SCRIPT = """
import json, sys
from pathlib import Path
import torch
from probes.step import libvariants, models, variants
out = {}
for path in sys.argv[1:]:
    model = models.build_model(Path(path), weights="random", device=torch.device("cpu"))
    changes = libvariants.prepare_base(model, catalog.FIXED["liger"])
    layer = model.model.layers[-1]
    mlp = layer.mlp.experts if hasattr(layer.mlp, "experts") else layer.mlp
    module = sys.modules[type(model).__module__]
    out[model.config.model_type] = {
        "call": changes["liger"],
        "norm": model.model.norm._get_name(),
        "mlp": mlp._get_name(),
        "rope": getattr(getattr(module, "apply_rotary_pos_emb", None), "__module__", ""),
    }
print(json.dumps(out))
"""


@pytest.mark.skipif(
    not HAS_LIGER, reason="liger's wiring needs liger-kernel (its `install liger-kernel` row is tested)"
)
def test_liger_patches_each_family_through_its_own_function(tiny, hybrid, qwen3_moe):
    """In a fresh process (Liger patches transformers' modules for the whole process): Qwen3 gets RoPE, SwiGLU and
    RMSNorm; Qwen3.5 keeps Liger's default of no RoPE (it raises when asked); the MoE's experts are Liger's."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    proc = subprocess.run([sys.executable, "-c", LIGER_SCRIPT, str(tiny), str(hybrid), str(qwen3_moe)], cwd=ROOT,
                          capture_output=True, text=True, env=env, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["qwen3"]["call"].startswith("apply_liger_kernel_to_qwen3(rope=True, swiglu=True, rms_norm=True")
    assert "fused_linear_cross_entropy=False" in got["qwen3"]["call"] and got["qwen3"]["rope"].startswith("liger")
    assert got["qwen3"]["norm"] == "LigerRMSNorm" and got["qwen3"]["mlp"] == "LigerSwiGLUMLP"
    assert got["qwen3_5_text"]["call"].startswith("apply_liger_kernel_to_qwen3_5(rope=False, swiglu=True")
    assert not got["qwen3_5_text"]["rope"].startswith("liger") and got["qwen3_5_text"]["norm"] == "LigerRMSNorm"
    assert got["qwen3_moe"]["call"].startswith("apply_liger_kernel_to_qwen3_moe(rope=True")
    assert got["qwen3_moe"]["mlp"] == "LigerExperts"
