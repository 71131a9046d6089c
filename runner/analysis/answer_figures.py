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

PROBE_ORDER = probes.ANSWERS
"""The order answers are shown in when no plan gives one."""
_ANSWERS = {name: probes.answer(name) for name in PROBE_ORDER}
TABLES = {name: a.TABLES for name, a in _ANSWERS.items()}
"""The tables each probe's answer is computed from."""
QUESTIONS = {name: a.QUESTION for name, a in _ANSWERS.items()}
RATIO_OF = {name: a.RATIO_OF for name, a in _ANSWERS.items() if a.RATIO_OF}
"""What a host measures (the rest is analysis of the same inputs): ratios are given for these only."""
EXACT = tuple(name for name, a in _ANSWERS.items() if a.EXACT)
"""Probes whose figures are exact (no timing): any change from the previous run is reported."""
EXTRACTORS = {name: a.figures for name, a in _ANSWERS.items()}
ROW_IDENTITY = ("model", "variant")


def generic(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    """The answer of a probe the registry does not know (rows of a probe since removed)."""
    return [summary_figures(summary)], []


def row_identity(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in ROW_IDENTITY)


def changes(probe: str, before: list[dict], after: list[dict], run_id: str, new_checkpoint: bool) -> list[str]:
    """The exact figures that differ from the previous ok run's (timings are drift's business)."""
    if probe not in EXACT:
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
