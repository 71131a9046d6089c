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
    return rows, notes + _launch_notes(tables["carriers"])


def _launch_notes(carriers: pd.DataFrame) -> list[str]:
    """A launch-bound row times the host's CPU as much as its GPU (a hybrid with its fast kernels, on an
    H100: busy 46% of the step): say so, and what would put the GPU back to work."""
    notes = []
    for _, r in carriers.iterrows():
        busy = plain(r.get("gpu_busy_frac"))
        if plain(r.get("launch_bound")) is not True or not isinstance(busy, float):
            continue
        name = "/".join(str(plain(r[k])) for k in IDENTITY if k in r.index and plain(r[k]) is not None)
        fewer = [] if "compile" in str(plain(r.get("variant")) or "") else ["fewer launches (`--variant compile`)"]
        notes.append(
            f"{name} is launch-bound: the GPU is busy {busy:.0%} of the step, so its time also measures how fast "
            f"this host's CPU launches kernels; to measure next: {' or '.join(fewer + ['more tokens a step (`--batch-size`)'])}"
        )
    return notes


def _trust(row: pd.Series) -> str:
    trust = plain(row.get("trustworthy"))
    why = []
    if plain(row.get("launch_bound")) is True:
        why.append("launch-bound")
    for column, what in (("spread_pct", "spread"), ("spread_across_pct", "processes disagree by")):
        spread = plain(row.get(column))
        if isinstance(spread, float) and spread > SPREAD_LIMIT_PCT:
            why.append(f"{what} {spread:.1f}% > {SPREAD_LIMIT_PCT:g}%")
    if trust is None:
        return "unknown" + (f" ({', '.join(why)})" if why else "")
    return "yes" if trust and not why else "no" + (f" ({', '.join(why)})" if why else "")
