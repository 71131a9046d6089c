"""A training speed, in real (non-padding) tokens a second, as a probe measured or priced it: what the lab's
budget is priced with (`labprobe recommend`, runner.analysis.recommend). Part of the door: a probe's answer
module that can say how fast a step trains declares `rates(tables, summary, config) -> list[Rate]` over its
stored rows, and the runner prices hours from those at read time, never from hours a row stored (a row's
hours price its own job's budget, which may not be the lab's).

Two kinds (`basis`):
- `step`: one batch shape timed (carrier's and profile's rows): rows x length tokens, every one real, no
  padding. Rates of one job at one shape give each stack's saving over the baseline (their ratio).
- `corpus`: a batching strategy over a corpus (goodput's priced epoch, replay's measured steps): the real
  tokens a second the lab's batches really give, padding and new shapes included.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

from probes.result import plain

STEP = "step"
CORPUS = "corpus"
BASELINE = "baseline"
"""The stack name of the harness as it is (no variant)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rate:
    basis: str
    """STEP (one batch shape, full rows) or CORPUS (a batching strategy on a corpus)."""
    real_tok_per_s: float
    """Real (non-padding) tokens trained a second."""
    stack: str = BASELINE
    """The variant or stack the step ran with; `baseline`: the harness as it is."""
    model: str | None = None
    """The row's model where one job measured several (a carrier family); None: the job's checkpoint."""
    shape: str = ""
    """What was timed: `1 x 4,096 tokens, full rows`; for CORPUS the strategy (and bucket size)."""
    corpus: str | None = None
    """CORPUS: the corpus (or lengths file) the strategy batched."""
    once_s: float = 0.0
    """One-off seconds a job pays besides its steady steps (the first step at each new batch shape)."""
    spread_pct: float | None = None
    """(max - min) / median of the timed steps, percent; None: not timed here (a price)."""
    trustworthy: bool | None = None
    """Measured within its limits (GPU-bound, spreads <= 2%); None: not known (a CPU, a price)."""
    within_tolerance: bool | None = None
    """The stack's numerics price within tolerance; True for the baseline; None: not measured."""
    replayed: bool = False
    """CORPUS: measured on the corpus's real batches (replay), not predicted from a step model."""
    predicted_tok_per_s: float | None = None
    """A replayed rate: what the step model predicted for the same steps."""
    step_s: float | None = None
    tokens_per_step: int | None = None
    note: str = ""
    """Why the rate is not trustworthy, or what it stands on (`fitted`, `launch-bound`)."""


def step_shape(rows: int | None, length: int | None, fill: str = "full") -> str:
    """`1 x 4,096 tokens, full rows`: the batch a step rate timed."""
    if not rows or not length:
        return "a shape not recorded"
    return f"{rows} x {length:,} tokens, {fill} rows"


def batching_shape(strategy: Any, bucket_size: Any) -> str:
    """`sorted batching (bucket size 64)`: what a corpus rate's batches were (goodput priced, replay ran)."""
    return f"{strategy} batching" + (f" (bucket size {bucket_size})" if bucket_size else "")


def positive(value: Any) -> float | None:
    """A stored figure as a float > 0, else None (a NaN, a failed row's empty value, a bool)."""
    value = plain(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 < value < math.inf else None


def flag(value: Any) -> bool | None:
    """A stored boolean, whichever way the store kept it (True, 1.0 beside a NaN); None when unknown."""
    value = plain(value)
    return None if value is None else bool(value)


def number(value: Any) -> float | None:
    """A stored figure as a float, None when missing."""
    value = plain(value)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def corpus_name(config: dict) -> str | None:
    """The corpus (or lengths file) a job batched, by its file name."""
    given = config.get("corpus") or config.get("lengths")
    return Path(str(given)).name if given else None
