"""The harness contract, whole: which piece of the training step comes from the lab's harness and
which from the reference (probes.step.harness), said by name.

Required: `discover_target_modules(model)` and `compute_loss(model, batch)` (probes.step.harness).
Optional, each used as given when present, else the reference's is used and named in
`fallbacks` (the probes' summary `harness_fallbacks`):

- `apply_lora(model, *, rank, alpha, targets) -> model`: LoRA, the adapter dtype included;
- `autocast_dtype`: a torch dtype the loss's forward runs under `torch.autocast` with, or None
  for no autocast (an attribute, so "none" and "not said" differ);
- `make_optimizer(params) -> torch.optim.Optimizer`: the optimizer over the trainable parameters;
- `gradient_checkpointing`: bool, whether the decoder recomputes activations in the backward;
- `train_step(model, batches, optimizer) -> loss`: one whole optimizer step over a list of
  micro-batches, used as is (the probe then only times it; it owns its precision, so the
  autocast fallback is "none" rather than the reference's).

`fingerprint(module)` is what a job records of the harness: its import path, the sha256 of its
source file and the torch/transformers/peft versions, so a harness change is never read as a host's drift.
"""

from __future__ import annotations

import dataclasses
import hashlib
import inspect
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from probes.step import harness as reference

_UNSET = object()


@dataclasses.dataclass(frozen=True)
class Contract:
    """The step's pieces as the probe will use them, and where each came from."""

    harness: ModuleType
    apply_lora: Callable
    autocast_dtype: torch.dtype | None
    make_optimizer: Callable
    gradient_checkpointing: bool
    train_step: Callable | None
    fallbacks: tuple[str, ...]
    """Pieces the harness lacks, taken from the reference."""

    def loss_fn(self, chunk_tokens: int) -> Callable:
        return reference.loss_fn(self.harness, chunk_tokens)

    def describe(self) -> dict[str, Any]:
        """The step as stored in the summary: optimizer class, autocast dtype, and the rest."""
        return {
            "apply_lora": _where(self, "apply_lora"),
            "autocast_dtype": None if self.autocast_dtype is None else str(self.autocast_dtype),
            "optimizer": _where(self, "make_optimizer"),
            "gradient_checkpointing": self.gradient_checkpointing,
            "train_step": "harness" if self.train_step is not None else "probe (compute_loss, backward, step)",
        }


def _where(contract: Contract, name: str) -> str:
    return f"{'reference' if name in contract.fallbacks else contract.harness.__name__}.{name}"


def resolve(harness: ModuleType) -> Contract:
    """Each optional piece from the harness when it has it, else the reference's (named)."""
    fallbacks = []

    def piece(name: str, default):
        value = getattr(harness, name, _UNSET)
        if value is _UNSET:
            fallbacks.append(name)
            return default
        return value

    train_step = piece("train_step", None)
    autocast_default = None if train_step is not None else reference.autocast_dtype
    return Contract(
        harness=harness,
        apply_lora=piece("apply_lora", reference.apply_lora),
        autocast_dtype=piece("autocast_dtype", autocast_default),
        make_optimizer=piece("make_optimizer", reference.make_optimizer),
        gradient_checkpointing=bool(piece("gradient_checkpointing", reference.gradient_checkpointing)),
        train_step=train_step,
        fallbacks=tuple(fallbacks),
    )


def optimizer_class(optimizer: torch.optim.Optimizer) -> str:
    """`AdamW (fused)`, `AdamW (foreach)`, `AdamW (for-loop)`, or the bare class when the
    implementation is torch's default choice (`foreach=None`) or the optimizer has no such option."""
    name, defaults = type(optimizer).__name__, optimizer.defaults
    if defaults.get("fused"):
        return f"{name} (fused)"
    if defaults.get("foreach") is not None:
        return f"{name} ({'foreach' if defaults['foreach'] else 'for-loop'})"
    return name


def fingerprint(harness: ModuleType) -> dict[str, str]:
    """Import path, sha256 of the module's source file, torch/transformers/peft versions."""
    import peft
    import transformers

    try:
        source = Path(inspect.getfile(harness)).read_bytes()
        digest = hashlib.sha256(source).hexdigest()[:16]
    except (TypeError, OSError):  # a built-in or generated module: nothing to hash
        digest = ""
    return {
        "harness": harness.__name__,
        "harness_sha256": digest,
        "torch": str(torch.__version__),  # a TorchVersion would import torch wherever it is unpickled
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
