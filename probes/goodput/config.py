"""The `goodput` probe's Config: its fields, each documented under it, and the checks of their values."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from probes.corpus import batching
from probes.corpus.config import CorpusConfig
from probes.result import FieldError, require
from probes.step.variants import stacks


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(CorpusConfig):
    batch_size: int = 8
    """Samples per batch (rows of max_length a batch for packed)."""
    max_length: int = 4096
    """Tokens per row: longer samples are truncated; fixed pads to it; packed fills rows of it."""
    strategies: tuple[str, ...] = batching.STRATEGIES
    """Batching strategies to price (fixed, longest, sorted, bucket, packed)."""
    bucket_size: int | None = None
    """Bucket size of `bucket`, a multiple of --batch-size; unset: the bucket probe's 90%-gain size."""
    seed: int = 0
    """Seed of the shuffle behind fixed, longest and bucket."""
    profile: Path | None = None
    """A `labprobe probe profile --json` output: its fit, launch-bound points and padding penalty."""
    quadratic_s: float | None = None
    """Given fit instead of --profile: seconds per batch*token^2."""
    linear_s: float | None = None
    """Given fit: seconds per token."""
    fixed_s: float | None = None
    """Given fit: seconds per batch (step)."""
    fit_min_len: int = 1
    """Given fit: the shortest sequence length it was fitted on."""
    fit_max_len: int | None = None
    """Given fit: the longest sequence length it was fitted on; unset: --max-length."""
    fit_batch_size: int = 1
    """Given fit: the batch size it was measured at."""
    floor_s: float | None = None
    """Given fit: the launch-bound step time below the fitted lengths (a step takes at least this)."""
    mask_penalty_pct: float = 0.0
    """Given fit: extra percent a padded or packed (masked) batch takes over a maskless one."""
    fit_launch_bound: bool = False
    """Given fit: it was built from launch-bound points (its numbers measure the host's CPU)."""
    stack_json: Path | None = None
    """A `labprobe probe carrier --json` (or `profile --variant ... --json`) output that measured a stack of
    variants beside the baseline: every step time of the model is scaled by the stack's step_s over the
    baseline's, so the hours are those of training with the stack (probes.step.steptime.stack_step)."""
    stack: str | None = None
    """The stack of --stack-json to price with (a --variant value, e.g. bf16-adapters+compile+fused-adamw);
    unset: its fastest row measured ok. Of --checkpoint's model when the file holds several."""
    new_shape_s: float | None = None
    """One-off seconds of the first step at each batch shape new to the process (with --profile: replaces
    the profile's own figure, 0 included; unset: the profile's, or 0 for a fit typed in)."""
    token_budget: int | None = None
    """Real training tokens a job (cluster.yaml budget.tokens_per_job); unset: one epoch of the corpus."""
    num_arms: int = 1
    """Arms of the sweep (cluster.yaml budget.arms)."""
    num_seeds: int = 1
    """Seeds an arm (cluster.yaml budget.seeds)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("fit_min_len", "fit_batch_size", "num_arms", "num_seeds"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        bad = [s for s in self.strategies if s not in batching.STRATEGIES]
        require(
            bool(self.strategies) and not bad, "strategies", f"unknown {bad} (known: {', '.join(batching.STRATEGIES)})"
        )
        require(
            self.bucket_size is None or (self.bucket_size >= 1 and self.bucket_size % self.batch_size == 0),
            "bucket_size",
            f"must be a multiple of `batch_size` {self.batch_size}, got {self.bucket_size}",
        )
        terms = [self.quadratic_s, self.linear_s, self.fixed_s]
        require(
            (self.profile is None) != (None in terms),
            "profile",
            "give exactly one step-time model: `profile` FILE, or `quadratic_s`, `linear_s` and `fixed_s`",
        )
        require(
            all(t is None or t >= 0 for t in terms) and (self.floor_s or 0) >= 0,
            "quadratic_s",
            "`quadratic_s`/`linear_s`/`fixed_s`/`floor_s` must be >= 0",
        )
        require(
            self.profile is not None or sum(t or 0 for t in terms) + (self.floor_s or 0) > 0,
            "fixed_s",
            "the given step model takes 0 s a step: give `fixed_s`, `linear_s` or `quadratic_s` above 0",
        )
        require(self.token_budget is None or self.token_budget >= 1, "token_budget", "must be >= 1")
        require(
            self.new_shape_s is None or (math.isfinite(self.new_shape_s) and self.new_shape_s >= 0),
            "new_shape_s",
            "must be a number >= 0",
        )
        require(
            self.stack is None or self.stack_json is not None, "stack", "needs `stack_json`, the run that measured it"
        )
        if self.stack is not None:  # its canonical spelling, as carrier stores it and a sweep hashes it
            try:
                object.__setattr__(self, "stack", stacks.canonical(self.stack))
            except FieldError as exc:  # an empty member: this field's error, not --variant's
                raise FieldError("stack", exc.message) from None
