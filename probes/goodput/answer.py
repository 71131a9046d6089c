"""The `goodput` probe's answer: how many hours will the run take, priced with which batching and which
stack? Read from its summary (the best strategy's hours, and without the stack when one priced them);
runner.analysis shows it."""

from __future__ import annotations

import pandas as pd

from probes import rate
from probes.result import plain

QUESTION = "goodput: how many hours will the run take, with the best batching (and stack)?"
TABLES = ()
EXACT = False
RATIO_OF = None
FIGURES = (
    "priced_with",
    "best_hours_per_job",
    "best_hours_sweep",
    "best_goodput_tok_per_s",
    "stack_step_factor",
    "baseline_hours_per_job",
    "step_model",
)


RATE_BASIS = rate.CORPUS
"""The kind of rate `rates` gives (probes.rate)."""
RATE_TABLES = ("goodput",)
RATE_HINT = (
    "a goodput entry in a plan stores one; `labprobe goodput --host {host} --profile-checkpoint {checkpoint} "
    "--corpus FILE --checkpoint DIR` prices it from a stored profile"
)
"""What prices the lab's batching here, when nothing is stored: recommend's line for what is missing."""


def figures(tables: dict, summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    """The figures, and the budget the hours price (the job's own: cluster.yaml's when a sweep ran it)."""
    row = {k: summary[k] for k in FIGURES if summary.get(k) is not None}
    tokens = summary.get("budget_tokens_per_job")
    if tokens:
        arms, seeds = summary.get("budget_arms", 1), summary.get("budget_seeds", 1)
        row["hours_priced_for"] = f"{tokens / 1e6:.4g}M tokens a job x {arms} arms x {seeds} seeds"
    return [row], []


def rates(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> list[rate.Rate]:
    """Each strategy's priced goodput on the corpus (a prediction from a step model), with the stack that
    priced it and its numerics verdict; the one-off new-shape seconds a job pays beside."""
    stack = summary.get("stack") or rate.BASELINE
    within = True if stack == rate.BASELINE else summary.get("stack_within_tolerance")
    found = []
    goodput = tables.get("goodput")
    for _, r in (goodput if goodput is not None else pd.DataFrame()).iterrows():
        tok_per_s = rate.positive(r.get("goodput_tok_per_s"))
        if tok_per_s is None:
            continue
        bucket = plain(r.get("bucket_size"))
        found.append(
            rate.Rate(
                basis=rate.CORPUS,
                real_tok_per_s=tok_per_s,
                stack=stack,
                shape=rate.batching_shape(plain(r.get("strategy")), bucket),
                corpus=rate.corpus_name(config),
                once_s=rate.number(r.get("new_shapes_s")) or 0.0,
                within_tolerance=within,
                note=f"predicted from {summary.get('step_model') or 'a step model'}",
            )
        )
    return found


def row_rates(table: str, rows: pd.DataFrame) -> pd.DataFrame | None:
    """Each strategy's goodput and the one-off seconds a job pays: its hours for another budget at read time."""
    if table != "goodput" or "goodput_tok_per_s" not in rows:
        return None
    once = rows["new_shapes_s"].fillna(0.0) if "new_shapes_s" in rows else 0.0
    return pd.DataFrame({"real_tok_per_s": rows["goodput_tok_per_s"], "once_s": once}, index=rows.index)
