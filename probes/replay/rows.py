"""The rows the `replay` probe stores, apart from probe.py: a sweep's driver unpickles them from each job's
outcome, and probe.py imports torch (~2 CPU-s a process that needs none of it)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class ReplayRow:
    strategy: str
    bucket_size: int | None
    num_steps: int
    real_tokens: int
    padded_tokens: int
    predicted_s: float | None
    measured_s: float | None
    error_pct: float | None
    predicted_tok_per_s: float | None
    measured_tok_per_s: float | None
    status: str = "ok"


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepRow:
    strategy: str
    step: int
    rows: int
    width: int
    real_tokens: int
    masked: bool
    new_shape: bool
    """The first step at this shape in the process (fit points and warm-up included): it pays new_shape_s."""
    predicted_s: float
    measured_s: float
