"""The `carrier` probe's answer: what does each model deliver here, and can the number be trusted?
Computed from the stored `carriers` table (runner.analysis shows it)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from probes import rate
from probes.result import SPREAD_LIMIT_PCT, plain

QUESTION = "carrier: what does each model deliver here, and can the number be trusted?"
TABLES = ("carriers",)
EXACT = False
RATIO_OF = "tok_per_s"
"""What a host measures: ratios between hosts are given for this figure."""
IDENTITY = ("model", "variant")
RATE_BASIS = rate.STEP
"""The kind of rate `rates` gives (probes.rate)."""
RATE_TABLES = ("carriers", "numerics")
"""The tables `rates` reads (numerics: each variant's verdict against the baseline's training)."""
RATE_HINT = (
    "a carrier entry for {checkpoint} on {host} with its variants measures their numerics beside the baseline "
    "(`search: true` finds the fastest stack within the tolerance)"
)
"""What measures a step rate here, when none is stored: recommend's line for what is missing."""


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


def rates(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> list[rate.Rate]:
    """Each measured row's real tokens a second at the run's shape (every token of carrier's rows is real, full
    or packed), from its mean step where stored (a job pays its slow steps too), with the numerics verdict."""
    carriers, numerics = tables.get("carriers"), tables.get("numerics")
    verdicts = {}
    if numerics is not None and not numerics.empty and "within_tolerance" in numerics:
        for _, r in numerics.iterrows():
            verdicts[(plain(r.get("model")), plain(r.get("variant")))] = rate.flag(r.get("within_tolerance"))
    shape = rate.step_shape(config.get("batch_size"), config.get("seq_len"), str(config.get("rows") or "full"))
    found = []
    for _, r in (carriers if carriers is not None else pd.DataFrame()).iterrows():
        status = str(plain(r.get("status")) or "ok")
        step_s = rate.positive(r.get("mean_step_s")) or rate.positive(r.get("step_s"))
        tokens = rate.positive(r.get("tokens_per_step"))
        if step_s is None or tokens is None or not (status == "ok" or status.startswith("not trustworthy")):
            continue
        model, variant = plain(r.get("model")), str(plain(r.get("variant")) or rate.BASELINE)
        trust = _trust(r)
        found.append(
            rate.Rate(
                basis=rate.STEP,
                real_tok_per_s=tokens / step_s,
                stack=variant,
                model=model,
                shape=shape,
                spread_pct=rate.number(r.get("spread_pct")),
                trustworthy=rate.flag(r.get("trustworthy")),
                within_tolerance=True if variant == rate.BASELINE else verdicts.get((model, variant)),
                step_s=step_s,
                tokens_per_step=int(tokens),
                note="" if trust == "yes" else trust,
            )
        )
    return found


def row_rates(table: str, rows: pd.DataFrame) -> pd.DataFrame | None:
    """Each stored row's real tokens a second (from its mean step where stored, as its hours were): what
    hours for another budget are recomputed from at read time (runner.analysis.rates.budget_hours)."""
    if table != "carriers" or "tokens_per_step" not in rows:
        return None
    step = pd.to_numeric(rows["step_s"], errors="coerce") if "step_s" in rows else pd.Series(float("nan"), rows.index)
    if "mean_step_s" in rows:
        step = pd.to_numeric(rows["mean_step_s"], errors="coerce").fillna(step)
    return pd.DataFrame({"real_tok_per_s": rows["tokens_per_step"] / step, "once_s": 0.0}, index=rows.index)
