"""The `carrier` probe's Config: its fields, each documented under it, and the checks of their values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probes.result import require
from probes.step import choices
from probes.step.config import StepConfig, VariantChoice
from probes.step.variants import catalog


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(StepConfig, VariantChoice):
    checkpoint: tuple[Path, ...]
    """Checkpoint directories of the family (repeat --checkpoint), each with config.json."""
    seq_len: int = 4096
    """Tokens per sequence."""
    batch_size: int = 1
    """Sequences per step (tokens per step = batch_size x seq_len)."""
    warmup_steps: int = 3
    """Untimed steps before timing."""
    steps: int = 10
    """Timed steps (the window the statistics use); 0: parameter counts only, on the meta device."""
    max_steps: int = 30
    """Cap on timed steps when the spread stays above 2 percent."""
    token_budget: int = 1_000_000_000
    """Training tokens per job, for the projected hours."""
    num_arms: int = 1
    """Arms of the sweep to project (hours_sweep = hours_per_job x arms x seeds)."""
    num_seeds: int = 1
    """Seeds per arm of the sweep to project."""
    peak_tflops: float | None = None
    """The peak mfu_vs_measured_peak divides by, TFLOP/s; unset: measured by a bf16 8192^3 matmul on the GPU."""
    variant: tuple[str, ...] = (catalog.BASELINE,)
    """Variants to measure, each in its own process (repeat --variant; probes.step.variants.catalog): baseline,
    bf16-autocast, bf16-adapters, fused-adamw, grad-ckpt, compile, liger, float8, float8-frozen, cuda-graphs, ce-chunk=N,
    micro-batch=N."""
    processes: int = 2
    """Fresh processes the baseline of each checkpoint is measured in (the across-process spread)."""
    seed: int = 0
    """Seed of the random weights and batches, the same in every process."""
    search: bool = False
    """Find the fastest stack within the numerics tolerance (probes.step.variants.search): the singles, then the
    best stack within it grown greedily; the candidates are the --variant values, or bf16-autocast,
    bf16-adapters, fused-adamw, compile, liger, float8, float8-frozen, cuda-graphs."""
    search_budget_s: float = 3600.0
    """Wall-clock budget of --search per checkpoint, seconds; stacks past it are listed as not tried."""
    numerics_steps: int = 30
    """Steps of the numerics price of every variant and stack on a fixed batch (probes.step.variants.numerics;
    0: none)."""
    rows: str = "full"
    """How the measured batch's rows are filled: full (no mask: SDPA's causal fast path) or packed (four
    sequences a row, positions restarting: a packing collator's block-diagonal mask). A stack saves less on
    masked rows: measure it as the lab batches. Packed rows carry positions only: a hybrid's linear-attention
    layers run each row as one sequence (the `mask` probe's cross_sequence names what keeps them apart)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.checkpoint) >= 1, "checkpoint", "needs at least one checkpoint")
        for name in ("seq_len", "batch_size", "max_steps", "token_budget", "num_arms", "num_seeds", "processes"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.steps >= 0 and self.warmup_steps >= 0, "steps", "`steps` and `warmup_steps` must be >= 0")
        require(self.max_steps >= self.steps, "max_steps", f"`max_steps` {self.max_steps} < `steps` {self.steps}")
        require(self.seq_len >= 2, "seq_len", f"must be >= 2, got {self.seq_len}")
        require(self.peak_tflops is None or self.peak_tflops > 0, "peak_tflops", "must be > 0")
        require(self.search_budget_s > 0, "search_budget_s", "must be > 0")
        require(not self.search or self.steps >= 1, "search", "needs `steps` >= 1 (`steps` 0 counts parameters only)")
        require(self.numerics_steps >= 0, "numerics_steps", "must be >= 0")
        require(self.rows in choices.ROWS, "rows", f"must be one of {', '.join(choices.ROWS)}, got {self.rows!r}")
        self.resolve_variants()
