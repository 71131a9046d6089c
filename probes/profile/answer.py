"""The `profile` probe's answer: where does the step's time go (each fit term's share at seq_len; the
padding penalty)? Computed from the stored `fit` table and the summary (runner.analysis shows it)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from probes import rate
from probes.result import plain

QUESTION = "profile: where does the step's time go (each fit term's share at seq_len; padding penalty)?"
TABLES = ("fit",)
EXACT = False
RATIO_OF = "step_s"
"""What a host measures: ratios between hosts are given for this figure."""
RATE_BASIS = rate.STEP
"""The kind of rate `rates` gives (probes.rate)."""
RATE_TABLES = ("scaling", "variants")
RATE_HINT = "a profile entry for {checkpoint} on {host} in a plan"
"""What measures a step rate here, when none is stored: recommend's line for what is missing."""


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


def rates(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> list[rate.Rate]:
    """The step at the production length (measured there, else the fit's, said in the note) and, with
    --variant, each variant's step at the same shape (no numerics measured here: unknown but the baseline's)."""
    seq_len, batch = summary.get("seq_len") or config.get("seq_len"), config.get("batch_size") or 1
    shape = rate.step_shape(batch, seq_len)
    found = []
    scaling = tables.get("scaling")
    point = None
    if scaling is not None and not scaling.empty and seq_len is not None:
        ok = scaling["status"].fillna("ok") == "ok" if "status" in scaling else True
        at = scaling[(scaling["seq_len"] == seq_len) & ok]
        point = at.iloc[0] if len(at) else None
    step_s = rate.positive(point.get("step_s")) if point is not None else rate.positive(summary.get("step_s"))
    if step_s is not None and seq_len:
        launch = rate.flag(point.get("launch_bound")) if point is not None else None
        spread = rate.number(point.get("spread_pct")) if point is not None else None
        found.append(
            rate.Rate(
                basis=rate.STEP,
                real_tok_per_s=batch * seq_len / step_s,
                shape=shape,
                spread_pct=spread,
                trustworthy=None if spread is None or launch is None else (spread <= 2.0 and not launch),
                within_tolerance=True,
                step_s=step_s,
                tokens_per_step=batch * seq_len,
                note="" if point is not None else f"fitted ({summary.get('step_s_source') or 'not measured'})",
            )
        )
    variants = tables.get("variants")
    for _, r in (variants if variants is not None else pd.DataFrame()).iterrows():
        step_s, tokens = rate.positive(r.get("step_s")), rate.positive(r.get("tokens"))
        variant = str(plain(r.get("variant")) or rate.BASELINE)
        if step_s is None or tokens is None or variant == rate.BASELINE or str(r.get("status")) != "ok":
            continue
        found.append(
            rate.Rate(
                basis=rate.STEP,
                real_tok_per_s=tokens / step_s,
                stack=variant,
                shape=shape,
                spread_pct=rate.number(r.get("spread_pct")),
                trustworthy=rate.flag(r.get("trustworthy")),
                within_tolerance=None,
                step_s=step_s,
                tokens_per_step=int(tokens),
            )
        )
    return found
