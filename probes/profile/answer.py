"""The `profile` probe's answer: where does the step's time go (each fit term's share at seq_len; the
padding penalty)? Computed from the stored `fit` table and the summary (runner.analysis shows it)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from probes.result import plain

QUESTION = "profile: where does the step's time go (each fit term's share at seq_len; padding penalty)?"
TABLES = ("fit",)
EXACT = False
RATIO_OF = "step_s"
"""What a host measures: ratios between hosts are given for this figure."""


def figures(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    row: dict[str, Any] = {"seq_len": summary.get("seq_len"), "step_s": summary.get("step_s")}
    fit = tables["fit"]
    for _, term in fit.iterrows():
        row[f"{term['term']}_pct"] = plain(term.get("share_at_production_pct"))  # share at seq_len
    row["heldout_err_pct"] = summary.get("max_heldout_err_pct")
    row["penalty_same_shape_pct"] = summary.get("padding_penalty_same_shape_pct")
    row["penalty_same_tokens_pct"] = summary.get("padding_penalty_same_tokens_pct")
    notes = []
    if summary.get("launch_bound_lens"):
        notes.append(f"left out of the fit as launch-bound: seq_len {summary['launch_bound_lens']}")
    return [row], notes
