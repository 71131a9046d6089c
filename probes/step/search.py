"""`--search`: the fastest stack of step changes, grown greedily, each stack predicted before measured.

1. The baseline (in `processes` fresh processes: its across-process spread is the noise) and every
   candidate alone, each in its own fresh process; a single's prediction is whatif's, from the
   baseline's attributed profile (None for compile, with the reason).
2. The best measured stack so far grows by one candidate per round: every compatible candidate not in
   it is added in turn (probes.step.stacks refuses the incompatible ones) and measured in a fresh process;
   the one that gains most over the current stack becomes the current stack. A stack measured in an
   earlier round is not measured again: it lost then to a stack no faster than the current one.
3. It stops when the round's best addition gains less than the noise (the baseline's spread across
   processes, or its in-process spread with one process), when no candidate is left, or when the time
   budget would be passed: every stack then not measured is listed in `not_tried`.

Each stack's step is predicted before it is measured (and logged, logger probes.step.search), two ways from
the singles: `predicted_step_s` = the current stack's measured step x (the addition's step alone /
the baseline's), the greedy rule's own estimate; `predicted_from_singles_step_s` = the baseline's
step x the product of every member's ratio alone. Their errors against the measurement follow it:
the changes interact (compile and bf16 adapters both cut the casts of fp32 LoRA), which the error shows.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import tempfile
import time

from probes.step import processes, stacks, variants, whatif
from probes.step.measurement import Measurement, Spec

LOG = logging.getLogger(__name__)
CANDIDATES = tuple(variants.FIXED[n] for n in ("bf16-autocast", "bf16-adapters", "fused-adamw", "compile", "liger"))
"""What `--search` tries when no --variant names the candidates."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class SearchRow:
    model: str
    round: int
    """1: the singles; n: stacks of n changes."""
    stack: str
    parent: str
    """The measured stack this one adds a change to (baseline in round 1)."""
    predicted_step_s: float | None
    predicted_from_singles_step_s: float | None
    predicted_attribution_step_s: float | None = None
    """Round 1: the baseline's step less whatif's predicted saving; None where whatif predicts nothing."""
    measured_step_s: float | None = None
    error_pct: float | None = None
    """(predicted_step_s - measured) / measured, percent."""
    error_from_singles_pct: float | None = None
    error_attribution_pct: float | None = None
    """Round 1: (predicted_attribution_step_s - measured) / measured, percent."""
    speedup: float | None = None
    """The baseline's step over this one's."""
    gain_pct: float | None = None
    """Over the parent's measured step, percent."""
    chosen: bool = False
    status: str = "ok"


@dataclasses.dataclass
class Outcome:
    baseline: Measurement
    results: list[Measurement] = dataclasses.field(default_factory=list)
    rows: list[SearchRow] = dataclasses.field(default_factory=list)
    best: str = variants.BASELINE
    stop: str = ""
    not_tried: list[str] = dataclasses.field(default_factory=list)


class _Search:
    def __init__(self, spec: Spec, model: str, budget_s: float):
        self.spec, self.model, self.budget_s = spec, model, budget_s
        self.begin = time.perf_counter()
        self.walls: list[float] = []
        self.singles: dict[str, float] = {}
        self.out: Outcome | None = None

    def fits(self) -> bool:
        """Whether one more process fits in the budget (a process costs the mean of those measured)."""
        estimate = sum(self.walls) / len(self.walls) if self.walls else 0.0
        return time.perf_counter() - self.begin + estimate <= self.budget_s

    def measure(
        self, round_: int, stack: variants.Variant, parent: variants.Variant, parent_s: float
    ) -> SearchRow | None:
        """Predict, then measure `stack` in a fresh process; None when the budget has no room for it."""
        if not self.fits():
            self.out.not_tried.append(stack.name)
            return None
        base_s = self.out.baseline.step_s
        members = stacks.members(stack.name)
        added = [m for m in members if m not in stacks.members(parent.name)]  # the baseline's members: itself
        ratio = [self.singles.get(m) for m in added]
        predicted = parent_s * math.prod(r / base_s for r in ratio) if None not in ratio else None
        singles = [self.singles.get(m) for m in members]
        from_singles = base_s * math.prod(r / base_s for r in singles) if None not in singles else None
        attributed = None
        if round_ == 1:
            saving, _ = whatif.predict(stack, self.out.baseline)
            attributed = None if saving is None else base_s * (1 - saving / 100)
        LOG.info("%s %s: predicted %s s (from singles %s, attribution %s)", self.model, stack.name, predicted,
                 from_singles, attributed)  # fmt: skip
        result = processes.run(dataclasses.replace(self.spec, variant=stack, profile_steps=1))
        self.walls.append(result.process_wall_s or 0.0)
        self.out.results.append(result)
        return _row(self.model, round_, parent.name, parent_s, base_s, (predicted, from_singles, attributed), result)


def _additions(current: variants.Variant, pool: list[variants.Variant], measured: set[str]) -> list[variants.Variant]:
    """The stacks one candidate larger than `current`: a candidate whose every member is in it already adds
    nothing (a stack candidate, `a+b` beside a stack holding a and b), and a stack measured in an earlier
    round lost to a stack no faster than `current`, so neither is measured again."""
    have = set(stacks.members(current.name))
    fits = [c for c in pool if not set(stacks.members(c.name)) <= have and stacks.compatible(current, c) is None]
    grown = {s.name: s for s in (stacks.add(current, c) for c in fits)}  # two candidates may give one stack
    return [s for name, s in grown.items() if name not in measured]


def _error(predicted: float | None, measured: float | None) -> float | None:
    return None if predicted is None or measured is None else 100 * (predicted - measured) / measured


def _row(model, round_, parent: str, parent_s, base_s, predictions, result: Measurement) -> SearchRow:
    predicted, from_singles, attributed = predictions
    measured = result.step_s if result.status == "ok" else None
    return SearchRow(
        model=model,
        round=round_,
        stack=result.variant.name,
        parent=parent,
        predicted_step_s=predicted,
        predicted_from_singles_step_s=from_singles,
        predicted_attribution_step_s=attributed,
        measured_step_s=measured,
        error_pct=_error(predicted, measured),
        error_from_singles_pct=_error(from_singles, measured),
        error_attribution_pct=_error(attributed, measured),
        speedup=None if measured is None else base_s / measured,
        gain_pct=None if measured is None else 100 * (parent_s - measured) / parent_s,
        status=result.status,
    )


def noise_pct(baseline: Measurement) -> float:
    """The gain below which an addition is noise: the baseline's spread across processes (in-process
    with one process)."""
    across = baseline.spread_across_pct
    return across if across is not None else baseline.spread_pct or 0.0


def run(spec: Spec, candidates: tuple[variants.Variant, ...], processes_n: int, budget_s: float, model: str) -> Outcome:
    """The greedy search over `candidates` for one checkpoint (see the module's docstring)."""
    search = _Search(spec, model, budget_s)
    with tempfile.TemporaryDirectory(prefix="labprobe-numerics-") as tmp:
        search.spec = spec = dataclasses.replace(spec, numerics_dir=spec.numerics_dir or tmp)
        search.out = out = Outcome(baseline=processes.measure_baseline(spec, candidates, processes_n))
        if out.baseline.status != "ok":
            out.stop = f"the baseline was not measured: {out.baseline.status}"
            return out
        _grow(search, out, candidates)
    return out


def _grow(search: _Search, out: Outcome, candidates: tuple[variants.Variant, ...]) -> None:
    base_s, noise = out.baseline.step_s, noise_pct(out.baseline)
    current, current_s, round_ = variants.BASELINE_VARIANT, base_s, 1
    pool = list(candidates)
    while True:
        tries = list(pool) if round_ == 1 else _additions(current, pool, {r.stack for r in out.rows})
        rows = [r for t in tries if (r := search.measure(round_, t, current, current_s)) is not None]
        out.rows += rows
        if round_ == 1:
            search.singles = {r.stack: r.measured_step_s for r in rows if r.measured_step_s is not None}
            pool = [c for c in pool if c.name in search.singles]  # not applicable or failed: not stacked
        measured = [r for r in rows if r.measured_step_s is not None]
        if not measured:
            failed = f"round {round_}: every stack tried failed ({', '.join(r.stack for r in rows)})" if rows else ""
            out.stop = out.stop or ("budget spent" if out.not_tried else failed or "no candidate left to add")
            break
        best = min(measured, key=lambda r: r.measured_step_s)
        if best.gain_pct < noise:
            out.stop = f"round {round_}: the best addition ({best.stack}) gains {best.gain_pct:.2f}%, under the noise {noise:.2f}%"
            break
        out.rows[out.rows.index(best)] = dataclasses.replace(best, chosen=True)
        current = next(t for t in tries if t.name == best.stack)
        current_s, round_ = best.measured_step_s, round_ + 1
    out.best = current.name
