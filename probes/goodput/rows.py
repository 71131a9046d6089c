"""The rows the `goodput` probe stores and the budget it prices, apart from probe.py: a sweep's driver unpickles
them from each job's outcome, and probe.py imports torch (~2 CPU-s a process that needs none of it)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Budget:
    """The lab's training budget: real tokens a job, arms of the sweep, seeds an arm."""

    tokens_per_job: int
    num_arms: int = 1
    num_seeds: int = 1


@dataclasses.dataclass(frozen=True, kw_only=True)
class GoodputRow:
    strategy: str
    bucket_size: int | None
    num_batches: int
    real_tokens: int
    padded_tokens: int
    pad_fraction: float
    epoch_s: float
    """Steady state: every shape already run once (the one-offs are in new_shapes_s)."""
    goodput_tok_per_s: float
    num_shapes: int
    """Distinct batch shapes (rows, width) over the job's epochs (reshuffled with seed+1, ...; at most
    MAX_SHAPE_EPOCHS of them are enumerated)."""
    new_shapes_s: float
    """num_shapes x the model's new_shape_s: paid once a job, counted in hours_per_job."""
    outside_fit_time_pct: float
    hours_per_job: float
    hours_sweep: float
