"""The `padding` probe's answer: how much of each batch is padding, per batching strategy? Computed from the
stored `strategies` table (runner.analysis shows it)."""

from __future__ import annotations

from typing import Any

import pandas as pd

QUESTION = "padding: how much of each batch is padding, per batching strategy?"
TABLES = ("strategies",)
EXACT = True
"""No timing: any change from the previous run is reported."""
RATIO_OF = None


def figures(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    rows = tables["strategies"]
    if rows.empty:
        return [{k: v for k, v in summary.items() if k.startswith("pad_fraction_")}], []
    row: dict[str, Any] = {"max_length": _int(rows, "max_length")}
    for strategy, part in rows.groupby("strategy", sort=False):
        row[f"{strategy}_pad_pct"] = 100.0 * float(part["pad_fraction"].iloc[0])
    row["num_samples"] = _int(rows, "num_samples")
    row["truncated_samples"] = _int(rows, "truncated_samples")
    row["truncated_tokens"] = _int(rows, "truncated_tokens")
    return [row], []


def _int(frame: pd.DataFrame, column: str) -> int | None:
    if column not in frame or frame[column].isna().all():
        return None
    return int(frame[column].dropna().iloc[0])
