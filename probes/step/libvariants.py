"""Variants that come from libraries a lab would use, and whether they apply here.

`liger`: Liger Kernel's `apply_liger_kernel_to_<model_type>` for the model's family, with RoPE, SwiGLU
and RMSNorm on and its cross-entropy pieces off: the harness computes its own loss from the decoder's
hidden states (probes.step.harness's chunked linear CE plays the role of Liger's fused linear CE), so a
patched model loss would never run. Liger's kernels are Triton: they need a CUDA device.

A variant whose library is missing, or that cannot run on this device or family, is a row whose
status is `not applicable: ...` (the worker returns it before building anything), never a failure.
Not built here, and why: packing through `DataCollatorWithFlattening` changes nothing for the probes'
step (its rows are full `seq_len` rows, no padding to remove; the padding and bucket probes price
packing on the corpus); cut-cross-entropy replaces the loss the harness owns.
"""

from __future__ import annotations

import importlib
import importlib.util

import torch

from probes.step import variants


def not_applicable(variant: variants.Variant, device: torch.device, model_type: str) -> str | None:
    """Why the variant cannot run here (`not applicable: ...`), or None."""
    if not variant.liger:
        return None
    if importlib.util.find_spec("liger_kernel") is None:
        return "not applicable: install liger-kernel"
    if device.type != "cuda":
        return "not applicable: liger-kernel's Triton kernels need a CUDA device"
    if _liger_apply(model_type) is None:
        return f"not applicable: liger-kernel has no apply_liger_kernel_to_{model_type}"
    return None


def _liger_apply(model_type: str):
    module = importlib.import_module("liger_kernel.transformers")
    return getattr(module, f"apply_liger_kernel_to_{model_type}", None)


def prepare_base(model, variant: variants.Variant) -> None:
    """The library's change to the base model, before LoRA wraps its projections."""
    if variant.liger:
        _liger_apply(model.config.model_type)(
            model=model, rope=True, swiglu=True, rms_norm=True, cross_entropy=False, fused_linear_cross_entropy=False
        )
