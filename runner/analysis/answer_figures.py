"""Each probe's headline figures from one job's stored rows (runner.analysis.answers uses them).

Each probe owns its answer (`probes.<name>.answer`, asked through the registry): its question, the tables it
is computed from, and an extractor that takes the job's tables (name -> its rows), its summary and its config
and returns the figure rows (dicts, units in the names) and notes. An extractor reads only columns the rows
have, so rows of an older or newer probe version give what they can rather than an error. A probe without an
answer module gets the generic extractor. Computation only.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

import probes
from probes.result import summary_figures


def order() -> list[str]:
    """The order answers are shown in when no plan gives one: the registry's."""
    return list(probes.REGISTRY)


def tables(probe: str) -> tuple[str, ...]:
    """The tables the probe's answer is computed from."""
    found = probes.answer(probe)
    return found.TABLES if found is not None else ()


def question(probe: str) -> str:
    found = probes.answer(probe)
    return found.QUESTION if found is not None else f"{probe}: the summary's figures"


def ratio_of(probe: str) -> str | None:
    """What a host measures (the rest is analysis of the same inputs): ratios are given for this figure only."""
    found = probes.answer(probe)
    return (found.RATIO_OF or None) if found is not None else None


def exact(probe: str) -> bool:
    """The probe's figures are exact (no timing): any change from the previous run is reported."""
    found = probes.answer(probe)
    return bool(found is not None and found.EXACT)


def extractor(probe: str):
    """(tables, summary, config) -> (figure rows, notes): the probe's own, or `generic`."""
    found = probes.answer(probe)
    return found.figures if found is not None else generic


ROW_IDENTITY = ("model", "variant")


def generic(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    """The answer of a probe without an answer module, or one the registry does not know (since removed)."""
    return [summary_figures(summary)], []


def row_identity(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in ROW_IDENTITY)


def changes(probe: str, before: list[dict], after: list[dict], run_id: str, new_checkpoint: bool) -> list[str]:
    """The exact figures that differ from the previous ok run's (timings are drift's business)."""
    if not exact(probe):
        return []
    old = {row_identity(r): r for r in before}
    out = []
    for row in after:
        prev = old.get(row_identity(row), {})
        for key, value in row.items():
            if key in prev and not _same(prev[key], value):
                out.append(f"{key} {_show(prev[key])} -> {_show(value)}")
    if out and new_checkpoint:
        out.append("(the checkpoint's content changed)")
    return [f"since run {run_id}: " + "; ".join(out)] if out else []


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)
