"""The `carrier` probe's answer: what does each model deliver here, and can the number be trusted?
Computed from the stored `carriers` table (runner.analysis shows it)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from probes.result import SPREAD_LIMIT_PCT, plain

QUESTION = "carrier: what does each model deliver here, and can the number be trusted?"
TABLES = ("carriers",)
EXACT = False
RATIO_OF = "tok_per_s"
"""What a host measures: ratios between hosts are given for this figure."""
IDENTITY = ("model", "variant")


def figures(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    rows = []
    for _, r in tables["carriers"].iterrows():
        row: dict[str, Any] = {k: plain(r[k]) for k in IDENTITY if k in r.index}
        for column in ("tok_per_s", "step_s", "spread_pct"):
            row[column] = plain(r.get(column))
        row["trust"] = _trust(r)
        status = str(r.get("status") or "ok")
        if status != "ok":
            row["status"] = status
        rows.append(row)
    advice = summary.get("advice") or []
    notes = [f"advice: {line}" for line in advice] if isinstance(advice, list) else []
    return rows, notes + _late_notes(tables["carriers"]) + _launch_notes(tables["carriers"])


def _late_notes(carriers: pd.DataFrame) -> list[str]:
    """A row timed whose later stages ran out of memory: its step time stands, its numerics do not exist."""
    notes = []
    for _, r in carriers.iterrows():
        late = plain(r.get("not_measured"))
        if late:
            name = "/".join(str(plain(r[k])) for k in IDENTITY if k in r.index and plain(r[k]) is not None)
            notes.append(f"{name}: timed, then not measured: {late}")
    return notes


def _launch_notes(carriers: pd.DataFrame) -> list[str]:
    """A launch-bound row's step time depends on how fast this host's CPU launches kernels, not only on
    its GPU: a faster GPU would not speed it up, and fewer launches or more work per launch would. The
    figures alone do not say so, hence a note per such row."""
    notes = []
    for _, r in carriers.iterrows():
        busy = plain(r.get("gpu_busy_frac"))
        if not _flag(r.get("launch_bound")) or not isinstance(busy, float):
            continue
        name = "/".join(str(plain(r[k])) for k in IDENTITY if k in r.index and plain(r[k]) is not None)
        compiled = "compile" in str(plain(r.get("variant")) or "")
        remedies = ([] if compiled else ["fewer launches (`--variant compile`)"]) + [
            "more tokens a step (`--batch-size`)"
        ]
        notes.append(
            f"{name} is launch-bound: the GPU is busy {busy:.0%} of the step, so its time also measures how "
            f"fast this host's CPU launches kernels; to measure next: {' or '.join(remedies)}"
        )
    return notes


def _flag(value: Any) -> bool:
    """A stored boolean, whichever way the store kept it (True, 1.0 beside a NaN, None)."""
    value = plain(value)
    return value is not None and bool(value)


def _trust(row: pd.Series) -> str:
    trust = plain(row.get("trustworthy"))
    why = []
    if _flag(row.get("launch_bound")):
        why.append("launch-bound")
    for column, what in (("spread_pct", "spread"), ("spread_across_pct", "processes disagree by")):
        spread = plain(row.get(column))
        if isinstance(spread, float) and spread > SPREAD_LIMIT_PCT:
            why.append(f"{what} {spread:.1f}% > {SPREAD_LIMIT_PCT:g}%")
    if trust is None:
        return "unknown" + (f" ({', '.join(why)})" if why else "")
    return "yes" if trust and not why else "no" + (f" ({', '.join(why)})" if why else "")
