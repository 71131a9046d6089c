"""`--search`: the fastest stack of step changes within the numerics tolerance, grown greedily, each stack
predicted before measured.

1. The baseline (in `processes` fresh processes: its across-process spread is the noise) and every
   candidate alone, each in its own fresh process; a single's prediction is whatif's, from the
   baseline's attributed profile (None for compile, with the reason). A row whose own timed steps spread above
   the 2% a trustworthy timing allows (over at least MIN_TRUSTED_STEPS of them) is measured once more in
   another fresh process, budget allowing, and the steadier process is kept (_Search.process), its row saying
   both (`remeasured`) and the two medians' disagreement kept as the row's `spread_across_pct`. On an H100 one
   noisy process had put a single 5% slow, adding ~5.5 points to a stack prediction's 10.9% error
   (benchmarks/RESULTS.md, 2026-12-07). The second process comes out of the same budget: a stack later in the
   queue may be left `not_tried` for it.
2. Every measured stack's numerics are compared with the baseline's as it is measured (probes.step.variants.numerics):
   `within_tolerance`. A single outside the tolerance is priced once and leaves the pool (a stack holding it
   would be outside too: precision lost is not won back by another change).
3. The best stack within the tolerance so far grows by one candidate per round: every compatible candidate
   not in it is added in turn (probes.step.variants.stacks refuses the incompatible ones) and measured in a fresh
   process; the fastest addition within the tolerance becomes the current stack. A stack measured in an
   earlier round is not measured again: it lost then to a stack no faster than the current one.
   `cuda-graphs` (a compile mode that only removes launch gaps) is tried only while the current stack is
   launch-bound (its GPU busy under 90% of the step; unknown on a CPU): listed in `skipped` otherwise.
4. It stops when the round's best addition within the tolerance gains less than the noise (the baseline's
   spread across processes, or its in-process spread with one process), when no addition is within it,
   when no candidate is left, or when the time budget would be passed: every stack then not measured is
   listed in `not_tried`.
5. The price of leaving the tolerance: each single outside it is stacked once onto the winner (members it
   conflicts with dropped: bf16-adapters in place of bf16-autocast), budget allowing, and `outside` says what
   the fastest stack outside the tolerance buys over the winner and what it costs (the bounds it breaks).

Without numerics (`numerics_steps` 0) nothing is within or outside: the search ranks by speed alone and says
so in `stop`. Each stack's step is predicted before it is measured (and logged, logger probes.step.variants.search),
two ways: `predicted_step_s` = the largest measured stack inside it (the current stack when it grows by one,
the rest of a swapped one) x the other members' step alone / the baseline's, the greedy rule's own estimate;
`predicted_from_singles_step_s` = the baseline's
step x the product of every member's ratio alone. Their errors against the measurement follow it:
the changes interact (compile and bf16 adapters both cut the casts of fp32 LoRA), which the error shows.
"""

from __future__ import annotations

import dataclasses
import logging
import tempfile
import time

from probes.result import SPREAD_LIMIT_PCT
from probes.step.measure import kernels
from probes.step.measure.timing import MIN_TRUSTED_STEPS
from probes.step.variants import catalog, numerics, processes, stacks, whatif
from probes.step.variants.measurement import Measurement, Spec

LOG = logging.getLogger(__name__)
CANDIDATES = tuple(
    catalog.FIXED[n]
    for n in (
        "bf16-autocast",
        "bf16-adapters",
        "fused-adamw",
        "compile",
        "liger",
        "float8",
        "float8-frozen",
        "cuda-graphs",
    )
)
"""What `--search` tries when no --variant names the candidates (micro-batch=N needs its N: name it)."""
EAGER_MISLEADS = {"float8", "float8-frozen"}
"""Changes whose single, measured eager, predicts nothing of a compiled stack: their casts fuse only compiled (on
CUDA a compiled float8-frozen is refused: probes.step.variants.libvariants)."""


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
    within_tolerance: bool | None = None
    """The numerics verdict against the baseline's (None: not measured, or the search runs without numerics)."""
    outside: str = ""
    """The tolerances it breaks (probes.step.variants.numerics.breaches), when outside."""
    peak_mem_bytes: int | None = None
    graph_breaks: int | None = None
    """A compiled stack's graph breaks (torch._dynamo's counters)."""
    chosen: bool = False
    status: str = "ok"
    remeasured: str = ""
    """Both processes of a row measured twice (its first one's timed steps spread above the limit), '' otherwise."""


@dataclasses.dataclass
class Outcome:
    baseline: Measurement
    results: list[Measurement] = dataclasses.field(default_factory=list)
    rows: list[SearchRow] = dataclasses.field(default_factory=list)
    best: str = catalog.BASELINE
    """The fastest stack within the numerics tolerance (by speed alone without numerics)."""
    stop: str = ""
    not_tried: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Candidates not tried and why (cuda-graphs beside a GPU-bound stack)."""
    outside: str = ""
    """What the fastest stack outside the tolerance buys over `best`, and what it costs."""

    def notes(self) -> dict:
        """The lines a probe's summary keeps."""
        notes = {"search_best": self.best, "search_stop": self.stop, "not_tried": self.not_tried}
        notes["search_skipped"] = self.skipped
        return {**notes, "search_outside": self.outside} if self.outside else notes


class _Search:
    def __init__(self, spec: Spec, model: str, budget_s: float):
        self.spec, self.model, self.budget_s = spec, model, budget_s
        self.begin = time.perf_counter()
        self.walls: list[float] = []
        self.singles: dict[str, float] = {}
        self.skipped: set[str] = set()
        self.out: Outcome | None = None

    def fits(self, estimate_s: float | None = None) -> bool:
        """Whether one more process fits in the budget: one that costs `estimate_s`, else the mean of those measured."""
        if estimate_s is None:
            estimate_s = sum(self.walls) / len(self.walls) if self.walls else 0.0
        return time.perf_counter() - self.begin + estimate_s <= self.budget_s

    def measure(
        self, round_: int, stack: catalog.Variant, parent: catalog.Variant, parent_s: float
    ) -> SearchRow | None:
        """Predict, then measure `stack` in a fresh process; None when the budget has no room for it."""
        if not self.fits():
            self.out.not_tried.append(stack.name)
            return None
        base_s = self.out.baseline.step_s
        members = stacks.members(stack.name)
        anchor, anchor_s = self.anchor(members, parent.name, parent_s)
        added = self.ratio([m for m in members if m not in anchor], compiled=stack.compile)
        predicted = anchor_s * added if added is not None else None
        from_singles = None if (whole := self.ratio(members, compiled=stack.compile)) is None else base_s * whole
        attributed = None
        if round_ == 1:
            saving, _ = whatif.predict(stack, self.out.baseline)
            attributed = None if saving is None else base_s * (1 - saving / 100)
        LOG.info("%s %s: predicted %s s (from singles %s, attribution %s)", self.model, stack.name, predicted,
                 from_singles, attributed)  # fmt: skip
        result, remeasured = self.process(stack)
        self.out.results.append(result)
        predictions = (predicted, from_singles, attributed)
        row = _row(self.model, round_, parent.name, parent_s, base_s, predictions, result, remeasured)
        if self.spec.numerics_steps and row.measured_step_s is not None:
            verdict = numerics.compare(self.model, self.out.baseline, result)
            outside = "; ".join(numerics.breaches(verdict)) if verdict.within_tolerance is False else ""
            row = dataclasses.replace(row, within_tolerance=verdict.within_tolerance, outside=outside)
        return row

    def process(self, stack: catalog.Variant) -> tuple[Measurement, str]:
        """`stack` in a fresh process; a noisy one once more, budget allowing, with the line that says both. Kept: a
        timed process before one that failed, one with its numerics (when asked) before one without, then the lower
        in-process spread (a tie keeps the first). The second is priced at the first's wall (a compiled stack's
        process is longer than the search's mean). With both timed, the kept one's figures stay its own, beside both
        medians (`process_step_s`) and their disagreement (`spread_across_pct`): a row is trustworthy only when the
        two agree within the limit too, as the baseline's processes must."""
        spec = dataclasses.replace(self.spec, variant=stack, profile_steps=1)
        first = processes.run(spec)
        self.walls.append(first.process_wall_s or 0.0)
        if not _noisy(first) or not self.fits(first.process_wall_s):
            return first, ""
        second = processes.run(spec)
        self.walls.append(second.process_wall_s or 0.0)
        asked = bool(self.spec.numerics_steps)
        kept = min((first, second), key=lambda m: (not _timed(m), asked and m.numerics is None, _spread(m)))
        said = "; then ".join(_said(m) for m in (first, second))
        line = f"measured twice, the first's steps spread above {SPREAD_LIMIT_PCT:g}%: {said}; the "
        line += f"{'first' if kept is first else 'second'} kept"
        if _timed(second):  # both medians and their disagreement as processes.merge states them; the figures kept's
            both = processes.merge([first, second])
            agree = both.spread_across_pct <= SPREAD_LIMIT_PCT
            kept = dataclasses.replace(
                kept,
                process_step_s=both.process_step_s,
                spread_across_pct=both.spread_across_pct,
                trustworthy=bool(kept.trustworthy) and agree,
            )
        LOG.info("%s %s: %s", self.model, stack.name, line)
        return kept, line

    def anchor(self, members: list[str], parent: str, parent_s: float) -> tuple[list[str], float]:
        """The largest stack measured so far whose members are all in `members` (the parent first: when a stack
        grows it is the parent; a swapped stack's is the rest without the swapped member, when that was measured,
        never the parent through the dropped member's ratio alone: -11% on an H100 where this rule gave -6%):
        its members and its step."""
        measured = [(parent, parent_s)] + [(r.variant.name, r.step_s) for r in self.out.results]
        best: tuple[list[str], float] = ([], self.out.baseline.step_s)
        for name, step_s in measured:
            part = [] if name == catalog.BASELINE else stacks.members(name)
            if step_s and set(part) < set(members) and len(part) > len(best[0]):
                best = (part, step_s)
        return best

    def ratio(self, members: list[str], compiled: bool = False) -> float | None:
        """The step ratio to the baseline's of these members' changes, from the candidates measured alone (a
        stack candidate counts as one: `compile+fused-adamw` asked for is measured as such); None where a member
        was not measured alone, or, for a `compiled` stack, where its single ran eager and is one whose casts
        fuse only compiled (float8 on an H100's 4B: x0.48-0.82 eager, faster than its parent stack compiled)."""
        if not members:
            return 1.0
        base_s = self.out.baseline.step_s
        for name, step_s in sorted(self.singles.items(), key=lambda kv: -len(stacks.members(kv[0]))):
            part = stacks.members(name)
            if compiled and "compile" not in part and EAGER_MISLEADS & set(part):
                continue
            rest = self.ratio([m for m in members if m not in part], compiled) if set(part) <= set(members) else None
            if rest is not None:
                return step_s / base_s * rest
        return None

    def eligible(self, row: SearchRow) -> bool:
        """Whether a measured stack may become the current one: within the tolerance (any, without numerics)."""
        if row.measured_step_s is None:
            return False
        return row.within_tolerance is True or not self.spec.numerics_steps

    def launch_bound(self, name: str) -> bool | None:
        """Whether the measured stack `name` left its GPU idle (None: unknown, e.g. on a CPU)."""
        found = self.out.baseline if name == catalog.BASELINE else None
        found = found or next((r for r in self.out.results if r.variant.name == name), None)
        busy = None if found is None else found.gpu_busy_frac
        return None if busy is None else busy < kernels.LAUNCH_BOUND_BELOW


def _additions(current: catalog.Variant, pool: list[catalog.Variant], measured: set[str]) -> list[catalog.Variant]:
    """The stacks one candidate larger than `current`: a candidate whose every member is in it already adds
    nothing (a stack candidate, `a+b` beside a stack holding a and b), and a stack measured in an earlier
    round lost to a stack no faster than `current`, so neither is measured again."""
    have = set(stacks.members(current.name))
    fits = [c for c in pool if not set(stacks.members(c.name)) <= have and stacks.compatible(current, c) is None]
    grown = {s.name: s for s in (stacks.add(current, c) for c in fits)}  # two candidates may give one stack
    return [s for name, s in grown.items() if name not in measured]


def _timed(m: Measurement) -> bool:
    return m.status == "ok" and m.step_s is not None and m.spread_pct is not None


def _noisy(m: Measurement) -> bool:
    """Timed over enough steps to be judged, and those steps spread above the limit (a short timing's spread says
    nothing: it is untrustworthy, not noisy)."""
    return _timed(m) and (m.steps or 0) >= MIN_TRUSTED_STEPS and m.spread_pct > SPREAD_LIMIT_PCT


def _spread(m: Measurement) -> float:
    return m.spread_pct if _timed(m) else 0.0


def _said(m: Measurement) -> str:
    return f"{m.step_s:.4f} s at a {m.spread_pct:.2f}% spread" if _timed(m) else m.status


def _error(predicted: float | None, measured: float | None) -> float | None:
    return None if predicted is None or measured is None else 100 * (predicted - measured) / measured


def _row(model, round_, parent: str, parent_s, base_s, predictions, result: Measurement, remeasured="") -> SearchRow:
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
        peak_mem_bytes=result.peak_mem_bytes,
        graph_breaks=result.graph_breaks,
        status=result.status,
        remeasured=remeasured,
    )


def noise_pct(baseline: Measurement) -> float:
    """The gain below which an addition is noise: the baseline's spread across processes (in-process
    with one process)."""
    across = baseline.spread_across_pct
    return across if across is not None else baseline.spread_pct or 0.0


def run(spec: Spec, candidates: tuple[catalog.Variant, ...], processes_n: int, budget_s: float, model: str) -> Outcome:
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


def _gaps_only(candidate: catalog.Variant) -> bool:
    """A candidate that only removes launch gaps (CUDA graphs)."""
    return candidate.compile_mode == "reduce-overhead"


def _tries(search: _Search, round_: int, current: catalog.Variant, pool: list[catalog.Variant]) -> list:
    """This round's stacks: the singles, then the current stack grown by each candidate; CUDA graphs only beside
    a stack that is not known to be GPU-bound (skipped, with the reason, otherwise)."""
    out = search.out
    tries = list(pool) if round_ == 1 else _additions(current, pool, {r.stack for r in out.rows})
    if search.launch_bound(current.name) is not False:
        return tries
    have = set(stacks.members(current.name))
    for t in [t for t in tries if _gaps_only(t)]:
        added = "+".join(m for m in stacks.members(t.name) if m not in have)  # the candidate, skipped once
        if added not in search.skipped:
            search.skipped.add(added)
            out.skipped.append(
                f"{added}: {current.name} is GPU-bound (busy >= 90% of its step): no launch gap to remove"
            )
        tries.remove(t)
    return tries


def _grow(search: _Search, out: Outcome, candidates: tuple[catalog.Variant, ...]) -> None:
    base_s, noise = out.baseline.step_s, noise_pct(out.baseline)
    current, current_s, round_ = catalog.BASELINE_VARIANT, base_s, 1
    pool, outside = list(candidates), []
    while True:
        tries = _tries(search, round_, current, pool)
        rows = [r for t in tries if (r := search.measure(round_, t, current, current_s)) is not None]
        out.rows += rows
        if round_ == 1:
            search.singles = {r.stack: r.measured_step_s for r in rows if r.measured_step_s is not None}
            outside = [c for c in pool if any(r.stack == c.name and r.within_tolerance is False for r in rows)]
            # a skipped candidate was not measured: it is tried again beside a later stack that leaves gaps
            pool = [c for c in pool if (c.name in search.singles and c not in outside) or c.name in search.skipped]
        measured = [r for r in rows if search.eligible(r)]
        if not measured:
            failed = f"round {round_}: every stack tried failed ({', '.join(r.stack for r in rows)})" if rows else ""
            if any(r.measured_step_s is not None for r in rows):
                failed = f"round {round_}: no addition within the numerics tolerance"
            out.stop = out.stop or ("budget spent" if out.not_tried else failed or "no candidate left to add")
            break
        best = min(measured, key=lambda r: r.measured_step_s)
        if best.gain_pct < noise:
            within = " within the tolerance" if search.spec.numerics_steps else ""
            out.stop = f"round {round_}: the best addition{within} ({best.stack}) gains {best.gain_pct:.2f}%, under the noise {noise:.2f}%"
            break
        out.rows[out.rows.index(best)] = dataclasses.replace(best, chosen=True)
        current = next(t for t in tries if t.name == best.stack)
        current_s, round_ = best.measured_step_s, round_ + 1
    out.best = current.name
    if not search.spec.numerics_steps:
        out.stop += "; no numerics measured: ranked by speed alone" if out.rows else ""
        return
    _price_outside(search, out, current, current_s, round_ + 1, outside)


def _swapped(current: catalog.Variant, single: catalog.Variant) -> catalog.Variant | None:
    """`current` with `single` added, the members it conflicts with dropped (None when nothing is left to add)."""
    keep = [m for m in stacks.members(current.name) if stacks.compatible(stacks.get(m), single) is None]
    grown = stacks.compose("+".join([*keep, single.name])) if keep else single
    return None if grown.name == current.name else grown


def _price_outside(search: _Search, out: Outcome, current: catalog.Variant, current_s: float, round_: int,
                   outside: list[catalog.Variant]) -> None:  # fmt: skip
    """Each single outside the tolerance stacked once onto the winner (budget allowing), then the line saying what
    the fastest stack outside the tolerance buys over the winner and what it costs."""
    measured = {r.stack for r in out.rows}
    for single in outside:
        grown = _swapped(current, single)
        if grown is not None and grown.name not in measured:
            row = search.measure(round_, grown, current, current_s)
            if row is not None:
                out.rows.append(row)
                measured.add(grown.name)
    rows = [r for r in out.rows if r.within_tolerance is False and r.measured_step_s is not None]
    if not rows:
        out.outside = "fastest outside the numerics tolerance: none measured"
        return
    fastest = min(rows, key=lambda r: r.measured_step_s)
    base_s = out.baseline.step_s
    buys = 100 * (current_s - fastest.measured_step_s) / current_s
    out.outside = (
        f"fastest outside the numerics tolerance: {fastest.stack}, x{base_s / fastest.measured_step_s:.3f} the "
        f"baseline's tok/s against the winner's x{base_s / current_s:.3f} ({buys:+.1f}% of the winner's step), "
        f"at the cost of: {fastest.outside}"
    )
