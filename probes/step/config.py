"""The fields every probe that runs the harness's training step shares (profile, carrier, replay): the
model, the harness and its LoRA, the loss's chunk, the device. A probe's Config inherits them; it
redeclares a field only to say more of it (the field keeps its place)."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from pathlib import Path

from probes.result import require
from probes.step import choices
from probes.step.variants import catalog, stacks


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepConfig:
    checkpoint: Path
    """Checkpoint directory with config.json (and weights unless --weights random)."""
    weights: choices.Weights = "checkpoint"
    """checkpoint: load the weights (local files only); random: build from config.json, random weights."""
    harness: str = choices.REFERENCE
    """Import path of the training harness providing discover_target_modules and compute_loss."""
    lora_rank: int = 32
    """LoRA rank on every target module the harness discovers."""
    lora_alpha: float = 64.0
    """LoRA alpha."""
    ce_chunk: int = choices.CHUNK_TOKENS
    """Cross-entropy chunk in tokens (passed to a harness whose compute_loss takes chunk_tokens)."""
    device: str = "auto"
    """auto (the GPU if any, else CPU), cpu, or cuda[:N]."""

    def __post_init__(self) -> None:
        require(bool(self.harness.strip()), "harness", "is empty: give an import path (default probes.step.harness)")
        require(self.lora_rank >= 1, "lora_rank", f"must be >= 1, got {self.lora_rank}")
        require(math.isfinite(self.lora_alpha) and self.lora_alpha > 0, "lora_alpha", "must be a number > 0")
        require(self.ce_chunk >= 1, "ce_chunk", "must be >= 1")
        require(
            re.fullmatch(r"auto|cpu|cuda(:\d+)?", self.device) is not None,
            "device",
            f"{self.device!r}: expected auto, cpu, cuda or cuda:N",
        )


class VariantChoice:
    """A Config's `variant` values and the Variants they name, resolved once: the Config's __post_init__
    resolves them (a bad name is its FieldError, before anything runs), the probe hands these objects to
    probes.step.variants.processes."""

    def resolve_variants(self) -> None:
        """The values in their canonical spelling (a stack's members sorted, blanks and a CE chunk's leading
        zeros dropped, each once), which the store keeps and a sweep hashes: `b+a` is the job `a+b` is, not
        a second measurement of one stack. Then the Variants, resolved."""
        object.__setattr__(self, "variant", tuple(dict.fromkeys(stacks.canonical(name) for name in self.variant)))
        self.resolved_variants  # noqa: B018 - resolved here, once: a bad name is this Config's FieldError

    @functools.cached_property
    def resolved_variants(self) -> tuple[catalog.Variant, ...]:
        """Baseline first and once, a stack under its canonical name (probes.step.variants.stacks.parse)."""
        return stacks.parse(self.variant)

    def __getstate__(self) -> dict:
        """Pickled (a Ray task's result holds its Config) without the Variants: they hold torch dtypes and a
        lab's own functions, which whoever reads the result need not import; they resolve again if used."""
        return {k: v for k, v in self.__dict__.items() if k != "resolved_variants"}
