"""A harness whose step runs out of memory on one model of a family (the untied one) and whose LoRA
runs out of memory on a model named in $LABPROBE_TEST_OOM_AT_LOAD: CUDA's own exception, raised where a
GPU would raise it, so a CPU test sees the probe turn it into a row. With $LABPROBE_TEST_OOM_FP32_ADAPTERS set, only
a step with fp32 adapters runs out (the baseline, not bf16-adapters: as the 4B's 6 x 2,048 on an H100)."""

import os

import torch

from probes.step.harness import apply_lora as reference_lora
from probes.step.harness import compute_loss as reference_loss
from probes.step.harness import discover_target_modules  # noqa: F401


def apply_lora(model, *, rank, alpha, targets):
    if os.environ.get("LABPROBE_TEST_OOM_AT_LOAD") == str(model.config.tie_word_embeddings):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    return reference_lora(model, rank=rank, alpha=alpha, targets=targets)


def compute_loss(model, batch):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    if os.environ.get("LABPROBE_TEST_OOM_FP32_ADAPTERS"):
        if any(p.dtype == torch.float32 for p in model.parameters() if p.requires_grad):
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB")
        return reference_loss(model, batch)
    if not base.config.tie_word_embeddings:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    return reference_loss(model, batch)
