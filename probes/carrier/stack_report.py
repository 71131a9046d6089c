"""Carrier's measurement of one checkpoint's variants and stacks, with their numerics price and the
settings of the fastest: the named set (`--variant`, each in fresh processes) or the greedy search
(`--search`, probes.step.variants.search). carrier.py keeps its rows and checks; this module gives it, per
checkpoint, the baseline, the other results and the extra tables (`search`, `numerics`) and lines
(`settings`, `search_stop`, `not_tried`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probes.carrier.contract import NUMERICS
from probes.step.variants import catalog, numerics, processes, search, settings
from probes.step.variants.measurement import Measurement, Spec


@dataclasses.dataclass
class Measured:
    baseline: Measurement
    others: list[Measurement]
    search_rows: list[search.SearchRow] = dataclasses.field(default_factory=list)
    numerics_rows: list[numerics.NumericsRow] = dataclasses.field(default_factory=list)
    notes: dict = dataclasses.field(default_factory=dict)


def _numerics_steps(config, chosen: tuple[catalog.Variant, ...]) -> int:
    """Numerics only where something is compared with the baseline."""
    return config.numerics_steps if (config.search or len(chosen) > 1) else 0


def measure(config, checkpoint: Path, model: str) -> Measured:
    """The config's resolved variants (or the search over them) on one checkpoint."""
    chosen = config.resolved_variants
    spec = Spec.of(config, checkpoint, numerics_steps=_numerics_steps(config, chosen), rows=config.rows)
    if config.search:
        candidates = tuple(v for v in chosen if v.name != catalog.BASELINE) or search.CANDIDATES
        outcome = search.run(spec, candidates, config.processes, config.search_budget_s, model)
        out = Measured(outcome.baseline, outcome.results, search_rows=outcome.rows)
        out.notes = outcome.notes()
    else:
        out = Measured(*processes.measure_set(spec, chosen, config.processes))
    if spec.numerics_steps:
        out.numerics_rows = [numerics.compare(model, out.baseline, r) for r in (out.baseline, *out.others)]
    out.notes["settings"] = _settings(config, checkpoint, out)
    return out


def fastest(out: Measured) -> Measurement:
    ok = [r for r in (out.baseline, *out.others) if r.status == "ok"]
    return min(ok, key=lambda r: r.step_s) if ok else out.baseline


def _settings(config, checkpoint: Path, out: Measured) -> list[str]:
    """The fastest measured stack as the change to make (the search's best, which beat the noise at each
    addition, when it searched), its numerics verdict and the command."""
    searched = out.notes.get("search_best")
    best = next((r for r in (out.baseline, *out.others) if r.variant.name == searched), None) or fastest(out)
    if not best.step_s:  # every row failed: the baseline's row is no advice
        return [f"{checkpoint.name}: nothing measured, no change to advise", _within(out)]
    name = best.variant.name
    verdict = next((r for r in out.numerics_rows if r.variant == name), None)
    mark = (
        ""
        if verdict is None
        else f" (numerics {verdict.basis})"
        if verdict.within_tolerance is None
        else " (numerics within tolerance)"
        if verdict.within_tolerance
        else f" (numerics OUTSIDE tolerance: {verdict.basis})"
    )
    what = "the search's best" if searched else "fastest"
    head = f"{checkpoint.name}: {what} {name}" + _speed_up(out.baseline, best) + mark
    command = settings.command(name, str(checkpoint), config)
    return [head, *(f"  {line}" for line in settings.lines(name)), f"  reproduce: {command}", _within(out)]


def _speed_up(baseline: Measurement, best: Measurement) -> str:
    """`, xN the baseline's tok/s`; said unknown where the baseline did not measure (out of memory where a
    leaner stack fit); empty where the best is the baseline itself (no x1.000) or did not measure either."""
    if not best.step_s or best is baseline:
        return ""
    if not baseline.step_s:
        return " (the baseline did not measure: its speed-up is unknown)"
    return f", x{baseline.step_s / best.step_s:.3f} the baseline's tok/s"


def _within(out: Measured) -> str:
    """The fastest measured change whose numerics are within tolerance (the baseline's always are)."""
    if out.baseline.status != "ok" or not out.baseline.step_s:  # nothing to compare the numerics or speed with
        return "fastest within the numerics tolerance: not measured (the baseline did not measure)"
    within = {r.variant for r in out.numerics_rows if r.within_tolerance}
    ok = [r for r in (out.baseline, *out.others) if r.status == "ok" and r.variant.name in within]
    if not out.numerics_rows or not ok:
        return "fastest within the numerics tolerance: not measured"
    best = min(ok, key=lambda r: r.step_s)
    return f"fastest within the numerics tolerance: {best.variant.name}, x{out.baseline.step_s / best.step_s:.3f}"


def collect(out: Measured, extra: dict) -> None:
    """A checkpoint's extra tables and lines into the family's (`tables` holds the non-empty tables)."""
    tables = extra.setdefault("tables", {})
    if out.search_rows:
        tables.setdefault("search", []).extend(out.search_rows)
    if out.numerics_rows:  # named by the contract other probes read it through
        tables.setdefault(NUMERICS, []).extend(out.numerics_rows)
    for key, value in out.notes.items():
        extra.setdefault(key, []).extend(value if isinstance(value, list) else [value])
