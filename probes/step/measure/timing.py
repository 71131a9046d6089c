"""The one timing helper: warm-up, CUDA events (GPU) or perf_counter (CPU), raw times kept.

`time_steps(step, ...)` runs `step()` `warmup` times untimed, then times `steps` calls. On a GPU each
call is bracketed by CUDA events and the end event is waited on before the next call, as a training
loop that logs its loss every step does: the step time then includes the GPU's idle gaps while the
host launches kernels, which is what a launch-bound step really costs. On the CPU, perf_counter.

While the spread ((max-min)/median) of the last `steps` timings is above `max_spread`, more steps
are timed, up to `max_steps` timed steps in all. The statistics are those of the LAST window of
`steps` timings: earlier timed steps count as extended warm-up (a cold allocator or autotuner
settles there). Every raw time is kept in `Timings.raw_s`, warm-up included.

That window is chosen for being quiet, so its spread is biased low: extension stops at the first
window under max_spread. `spread_all` is therefore reported beside it: the spread over EVERY timed
step after the configured warm-up (extension included). `trustworthy` means exactly: the last
window of `steps` timed steps has a spread <= 2% (at least `steps` consecutive steps agreed within
2%); it does not say the earlier timed steps did: read `spread_all` for that.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable

import torch

from probes.result import SPREAD_LIMIT_PCT

MAX_SPREAD = SPREAD_LIMIT_PCT / 100
"""The same limit as a fraction (docs/measurement.md's timing rules)."""
MIN_TRUSTED_STEPS = 3
"""Fewer timed steps than this are never trustworthy: the spread of one step is 0 by construction."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Timings:
    raw_s: tuple[float, ...]
    """Every step's time in seconds, warm-up first, in the order they ran."""
    num_warmup: int
    """Leading entries of raw_s not used in the statistics (configured warm-up + extension)."""
    device: str
    num_warmup_configured: int | None = None
    """The configured warm-up alone (None: num_warmup, no extension); spread_all starts after it."""

    @property
    def window_s(self) -> tuple[float, ...]:
        return self.raw_s[self.num_warmup :]

    @property
    def num_steps(self) -> int:
        return len(self.window_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.window_s)

    @property
    def spread(self) -> float:
        """(max - min) / median over the window: a fraction, 0.02 is 2%."""
        return _spread(list(self.window_s))

    @property
    def all_timed_s(self) -> tuple[float, ...]:
        """Every timed step after the configured warm-up (the extension included)."""
        start = self.num_warmup if self.num_warmup_configured is None else self.num_warmup_configured
        return self.raw_s[start:]

    @property
    def spread_all(self) -> float:
        """(max - min) / median over every timed step after the configured warm-up: not biased low
        by the choice of a quiet window."""
        return _spread(list(self.all_timed_s))

    @property
    def iqr(self) -> float:
        """Interquartile range over the median: robust to one outlier where the spread is not."""
        w = self.window_s
        if len(w) < 2:
            return 0.0
        q1, _, q3 = statistics.quantiles(w, n=4, method="inclusive")
        return (q3 - q1) / self.median_s

    @property
    def mean_all_s(self) -> float:
        """Mean of every timed step after the configured warm-up (extension included): what a job that runs
        many such steps pays a step, its slow ones too (a sum of steps is priced from means, not medians)."""
        return statistics.fmean(self.all_timed_s)

    @property
    def trustworthy(self) -> bool:
        """The last window of timed steps, at least MIN_TRUSTED_STEPS of them, agreed within 2% (see the
        module docstring): one or two steps have a spread that says nothing."""
        return self.num_steps >= MIN_TRUSTED_STEPS and self.spread <= MAX_SPREAD

    def to_dict(self) -> dict:
        return {
            "device": self.device,
            "num_warmup": self.num_warmup,
            "raw_s": list(self.raw_s),
            "median_s": self.median_s,
            "spread": self.spread,
            "spread_all": self.spread_all,
            "iqr": self.iqr,
            "mean_all_s": self.mean_all_s,
            "num_warmup_configured": self.num_warmup_configured,
        }


def _timed_call(step: Callable[[], object], device: torch.device, clock: Callable[[], float]) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1000.0
    begin = clock()
    step()
    return clock() - begin


def time_steps(
    step: Callable[[], object],
    *,
    device: torch.device | str,
    warmup: int,
    steps: int,
    max_steps: int | None = None,
    max_spread: float = MAX_SPREAD,
    clock: Callable[[], float] = time.perf_counter,
) -> Timings:
    """Time `step()`; extend while the last window's spread exceeds max_spread, up to max_steps.
    `clock` times CPU steps (injectable so tests can drive it)."""
    assert steps >= 1 and warmup >= 0
    device = torch.device(device)
    max_steps = max(steps, max_steps or steps)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    raw = [_timed_call(step, device, clock) for _ in range(warmup)]
    timed = [_timed_call(step, device, clock) for _ in range(steps)]
    while len(timed) < max_steps and _spread(timed[-steps:]) > max_spread:
        timed.append(_timed_call(step, device, clock))
    num_warmup = warmup + len(timed) - steps
    return Timings(raw_s=tuple(raw + timed), num_warmup=num_warmup, device=device.type, num_warmup_configured=warmup)


def _spread(values: list[float]) -> float:
    return (max(values) - min(values)) / statistics.median(values)
