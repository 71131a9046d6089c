"""Variants that come from libraries a lab would use, or that need a device feature, and whether they apply here.

- `liger`: Liger Kernel's `apply_liger_kernel_to_<family>` for the model's `model_type` (looked up in Liger's own
  table of families, which also maps `qwen3_5_text` to its Qwen3.5 function), on the built model before LoRA,
  with RoPE, SwiGLU and RMSNorm on and its cross-entropy pieces off: the harness computes its own loss from the
  decoder's hidden states (probes.step.harness's chunked linear CE plays the role of Liger's fused linear CE),
  so a patched model loss would never run. A family whose function leaves a kernel off by default (Qwen3.5's
  RoPE: Liger raises if asked) keeps Liger's default for it; `library_changes` says what was applied. Liger's
  kernels are Triton: they need a CUDA device.
- `float8`: torchao's `convert_to_float8_training` on the frozen base projections that LoRA wraps (the
  `base_layer` of each adapted linear whose two dimensions are multiples of 16, as `torch._scaled_mm` needs),
  after LoRA: the adapters, lm_head and routers stay as they were. Needs torchao and a card of compute
  capability 8.9 or more (H100/H200 9.0, GB10 12.1).
- `float8-frozen`: the same projections through labprobe's own static float8 (probes.step.variants.fp8): no
  library; on CUDA the card's compute capability 8.9 or more, and eager only (compiled, its input gradients came
  out zero on an H100); on a CPU torch's own `_scaled_mm`, compiled or not.
- `cuda-graphs`: needs CUDA (a graph captures a device's launches).
- `micro-batch=N`: N must divide the step's rows and be fewer than them.

A variant whose library is missing, or that cannot run on this device, family or shape, is a row whose status
is `not applicable: ...` (the worker returns it before building anything), never a failure.
Not built here, and why: packing through `DataCollatorWithFlattening` changes nothing for the probes'
step (its rows are full `seq_len` rows, no padding to remove; the padding and bucket probes price
packing on the corpus); cut-cross-entropy replaces the loss the harness owns.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect

import torch
from torch import nn

from probes.step.variants import catalog

FLOAT8_CAPABILITY = (8, 9)
"""float8 tensor-core GEMMs (torch._scaled_mm): Ada and Hopper on, GB10's 12.1 included."""
LIGER_KERNELS = ("rope", "swiglu", "rms_norm")


def not_applicable(
    variant: catalog.Variant, device: torch.device, model_type: str, batch_size: int | None = None
) -> str | None:
    """Why the variant cannot run here (`not applicable: ...`), or None. A missing library is named first (what
    to install), then the device. `batch_size`: the step's rows (None where the caller's steps take no
    micro-batches: replay's)."""
    reasons = (
        _liger(device, model_type) if variant.liger else None,
        _float8(device) if variant.float8 else None,
        _float8_frozen(device, variant.compile) if variant.float8_frozen else None,
        _cuda_graphs(device) if variant.compile_mode == "reduce-overhead" else None,
        _micro_batch(variant.micro_batch, batch_size) if variant.micro_batch is not None else None,
    )
    return next((r for r in reasons if r is not None), None)


def _liger(device: torch.device, model_type: str) -> str | None:
    if importlib.util.find_spec("liger_kernel") is None:
        return "not applicable: install liger-kernel"
    if device.type != "cuda":
        return "not applicable: liger-kernel's Triton kernels need a CUDA device"
    if liger_apply(model_type) is None:
        return f"not applicable: liger-kernel has no apply_liger_kernel_to_* for {model_type}"
    return None


def _float8(device: torch.device) -> str | None:
    if importlib.util.find_spec("torchao") is None:
        return "not applicable: install torchao"
    if device.type != "cuda":
        return "not applicable: float8 needs CUDA, a card of compute capability 8.9 or more (H100/H200, GB10)"
    return float8_refusal(torch.cuda.get_device_capability(device))


COMPILED_FLOAT8_FROZEN = (
    "not applicable: compiled, float8-frozen's input gradients come out zero on CUDA (an H100, torch 2.11: the "
    "forward right, the backward's float8 GEMM zero in the traced backward, with Inductor or aot_eager); its eager "
    "row runs"
)


def _float8_frozen(device: torch.device, compiled: bool) -> str | None:
    """torch's own `_scaled_mm` runs on a CPU (a test of the wiring and numerics; compiled equals eager there); on
    CUDA it needs 8.9, and compiled it is refused: a step without its backward GEMMs would be timed as a stack."""
    if device.type != "cuda":
        return None
    if compiled:
        return COMPILED_FLOAT8_FROZEN
    return float8_refusal(torch.cuda.get_device_capability(device))


def float8_refusal(capability: tuple[int, int]) -> str | None:
    """Why a card of this compute capability cannot run float8 GEMMs, or None."""
    if tuple(capability) >= FLOAT8_CAPABILITY:
        return None
    return (
        "not applicable: float8 matmuls need compute capability 8.9 or more (H100/H200, GB10); "
        f"this card is {capability[0]}.{capability[1]}"
    )


def _cuda_graphs(device: torch.device) -> str | None:
    if device.type != "cuda":
        return "not applicable: cuda-graphs needs CUDA (a graph replays a device's kernel launches)"
    return None


def _micro_batch(rows: int, batch_size: int | None) -> str | None:
    if batch_size is None:
        return f"not applicable: micro-batch={rows} splits a step's rows: carrier measures it"
    if rows >= batch_size:
        return f"not applicable: micro-batch={rows} holds the whole step of {batch_size} row(s): no accumulation"
    if batch_size % rows:
        return f"not applicable: micro-batch={rows} does not divide the step's {batch_size} rows"
    return None


def liger_apply(model_type: str):
    """Liger's apply function for the family: its own table first (it maps text-only model types such as
    `qwen3_5_text`), then `apply_liger_kernel_to_<model_type>`; None when it has neither."""
    from liger_kernel.transformers import monkey_patch

    table = getattr(monkey_patch, "MODEL_TYPE_TO_APPLY_LIGER_FN", {})
    found = table.get(model_type)
    if found is None:
        found = getattr(
            importlib.import_module("liger_kernel.transformers"), f"apply_liger_kernel_to_{model_type}", None
        )
    return found


def liger_kwargs(apply) -> dict[str, bool]:
    """The keywords for `apply`: RoPE, SwiGLU and RMSNorm on where the family's function takes them and does not
    leave them off by default (Liger's Qwen3.5 raises when asked for RoPE), every cross-entropy piece off."""
    params = inspect.signature(apply).parameters
    out = {k: params[k].default is not False for k in LIGER_KERNELS if k in params}
    out.update({k: False for k in ("cross_entropy", "fused_linear_cross_entropy") if k in params})
    return out


def prepare_base(model, variant: catalog.Variant) -> dict:
    """The library's change to the base model, before LoRA wraps its projections; what was applied."""
    if not variant.liger:
        return {}
    apply = liger_apply(model.config.model_type)
    kwargs = liger_kwargs(apply)
    apply(model=model, **kwargs)
    return {"liger": f"{apply.__name__}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"}


def float8_targets(model: nn.Module) -> list[str]:
    """The frozen base projections float8 converts: each adapted linear's `base_layer`, both dimensions multiples
    of 16 (torch._scaled_mm's rule), weight frozen."""
    return [
        name
        for name, module in model.named_modules()
        if name.endswith(".base_layer")
        and type(module) is nn.Linear
        and not module.weight.requires_grad
        and module.in_features % 16 == 0
        and module.out_features % 16 == 0
    ]


def prepare_adapted(model: nn.Module, variant: catalog.Variant, *, emulate: bool = False) -> dict:
    """The library's change once LoRA is applied (float8 on the base projections it wraps); what was applied.
    `emulate`: torchao's emulated float8 (a CPU test of the wiring, never a measurement)."""
    if variant.float8_frozen:
        return _convert_frozen(model)
    if not variant.float8:
        return {}
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    targets = set(float8_targets(model))
    if not targets:
        raise catalog.NotApplicable("float8: no frozen base projection with both dimensions multiples of 16")
    convert_to_float8_training(
        model, module_filter_fn=lambda _m, fqn: fqn in targets, config=Float8LinearConfig(emulate=emulate)
    )
    return {"float8": f"{len(targets)} base projections converted (torchao Float8Linear, tensorwise scales)"}


def _convert_frozen(model: nn.Module) -> dict:
    from probes.step.variants import fp8

    targets = set(float8_targets(model))
    if not targets:
        raise catalog.NotApplicable("float8-frozen: no frozen base projection with both dimensions multiples of 16")
    fp8.convert(model, targets)
    return {"float8-frozen": f"{len(targets)} base projections in e4m3, quantized once (row-wise scales)"}
