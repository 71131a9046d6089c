"""Drift: has a host's metric moved against its own earlier runs of the same work?

One rule, used by `labprobe history` and by the morning report. A series is one host measuring
one thing (probe, checkpoint fingerprint, probe config hash, and the row's identity columns such
as `seq_len` or the carrier's model). Each run's value is compared with the median of that
series' earlier runs; an alert fires when it moved by more than `threshold_pct`, and only when
the new value is trustworthy: its spread ((max-min)/median, the row's spread column) is at most
`max_spread_pct`. A metric with no spread column (token counts, parameter counts) is exact and
always trusted. The median of earlier runs, not the last run, so one odd night does not become
the baseline.
"""

from __future__ import annotations

import re

import pandas as pd

from probes.result import SPREAD_LIMIT_PCT, InputError
from runner.store.store import KEY_COLUMNS

# The work a series is about; rows that differ here are never compared.
SERIES_KEYS = ("probe", "host", "checkpoint", "checkpoint_fp", "config_hash", "variant")
"""`variant` (probes.step.variants): rows of different variants are different work, never one series."""
# Integer columns that name a shape of the work (every other integer is a measurement or a count
# that may vary run to run, such as the timed `steps`); outcome flags and texts are not identity.
DIMENSIONS = frozenset(
    {"seq_len", "batch_size", "num_tokens", "tokens_per_step", "length", "bucket_size", "layer", "num_sequences"}
)
NOT_IDENTITY = frozenset(
    {"status", "reason", "detail", "top_kernel", "note", "attention_backends", "kernel_fallbacks", "caveat"}
    | {"not_measured"}
)
"""Outcomes, not what was measured: a run that fell back to a slower kernel is the same series, slower."""
_MEASURED = re.compile(r"_(s|ms|us|ns|bytes|per_s|pct|frac|fraction)$")
"""A unit in the name: a measurement, whatever its type, never identity."""
_UNIT_SUFFIX = re.compile(r"_(s|ms|us|ns|bytes|per_s|pct|fraction)$")

DRIFT_COLUMNS = (
    "run_id",
    "finished_at",
    "value",
    "spread_pct",
    "baseline",
    "num_previous",
    "change_pct",
    "trusted",
    "alert",
)

# -- the trust rule, owned here: compare, the report and drift all read spreads through it ------
# SPREAD_LIMIT_PCT (probes.result): a value whose spread ((max-min)/median) is above it is untrusted.


def is_spread_column(name: str) -> bool:
    """Spread columns say so in their name: `spread_pct`, `step_s_spread_pct`, `spread` (a fraction)."""
    return "spread" in name


def spread_pct(values: pd.Series, column: str) -> pd.Series:
    """`column`'s spreads in percent: a `*_pct` column is in percent already, any other a fraction."""
    return values * (1.0 if column.endswith("_pct") else 100.0)


def spread_fraction(values: pd.Series, column: str) -> pd.Series:
    """`column`'s spreads as fractions, for `:.1%` printing as compare always printed them (`:.1f`
    of the percent would round a stored 6.55 to 6.5 where `:.1%` of 6.55 / 100 gives 6.6)."""
    return values / (100.0 if column.endswith("_pct") else 1.0)


def above_spread_limit(spread_in_pct: pd.Series, limit_pct: float = SPREAD_LIMIT_PCT) -> pd.Series:
    """True where the spread (in percent) is above the limit; NaN is not above it (callers decide)."""
    return spread_in_pct > limit_pct


def spread_column(columns: list[str] | pd.Index, metric: str) -> str | None:
    """The column holding `metric`'s spread: `<stem>_spread_pct`, `<stem>_spread`, `spread_pct`, `spread`."""
    stem = _UNIT_SUFFIX.sub("", metric)
    for name in (f"{stem}_spread_pct", f"{stem}_spread", f"{metric}_spread_pct", "spread_pct", "spread"):
        if name in columns and name != metric:
            return name
    return None


def identity_columns(frame: pd.DataFrame, metric: str) -> list[str]:
    """Non-key columns that say what a row measures: text columns, and integer shape columns."""
    skip = set(KEY_COLUMNS) | NOT_IDENTITY | {metric, spread_column(frame.columns, metric)}
    found = []
    for name in frame.columns:
        if name in skip or name.endswith("_json") or _MEASURED.search(name):
            continue
        if frame[name].isna().all():
            continue  # nothing measured there (a GPU-only column on the CPU): says nothing
        dtype = frame[name].dtype
        if pd.api.types.is_bool_dtype(dtype) or pd.api.types.is_float_dtype(dtype):
            continue
        if pd.api.types.is_integer_dtype(dtype) and name not in DIMENSIONS:
            continue
        if pd.api.types.is_object_dtype(dtype) and frame[name].dropna().map(type).isin([bool, float]).any():
            continue  # an object column of flags or numbers (None mixed in), not of names
        found.append(name)
    return found


def drift_table(
    frame: pd.DataFrame,
    metric: str,
    *,
    by: list[str] | None = None,
    threshold_pct: float = 3.0,
    max_spread_pct: float = SPREAD_LIMIT_PCT,
    min_previous: int = 1,
) -> pd.DataFrame:
    """One row per series and run: the value, the median of earlier runs, the change, the alert.

    `frame` is a stored table (key columns plus the probe's own); `by` overrides the identity
    columns. Rows come back in time order within each series.
    """
    if metric not in frame.columns:
        numeric = [c for c in frame.columns if pd.api.types.is_numeric_dtype(frame[c].dtype) and c not in KEY_COLUMNS]
        raise InputError(f"no column {metric!r}; numeric columns: {', '.join(numeric) or 'none'}")
    by = identity_columns(frame, metric) if by is None else list(by)
    missing = [c for c in by if c not in frame.columns]
    if missing:
        raise InputError(f"--by: no column {missing[0]!r} in this table")
    if "variant" in frame.columns and "variant" not in by:  # variants are different work: never one series
        by.append("variant")
    series = [c for c in SERIES_KEYS if c in frame.columns] + [c for c in by if c not in SERIES_KEYS]
    spread = spread_column(frame.columns, metric)
    work = frame[series + ["run_id", "finished_at", metric] + ([spread] if spread else [])].copy()
    work["value"] = pd.to_numeric(work[metric], errors="coerce").astype(float)
    if spread:
        work["spread_pct"] = spread_pct(pd.to_numeric(work[spread], errors="coerce").astype(float), spread)
    else:
        work["spread_pct"] = 0.0  # exact metric: nothing to distrust
    work = work.dropna(subset=["value"])
    if work.empty:
        return pd.DataFrame(columns=series + list(DRIFT_COLUMNS))
    # Several rows of one series in one run (repeats): the run's value is their median.
    runs = (
        work.groupby(series + ["run_id"], dropna=False, sort=False)
        .agg(finished_at=("finished_at", "max"), value=("value", "median"), spread_pct=("spread_pct", "max"))
        .reset_index()
        .sort_values("finished_at", kind="stable")
    )
    # An unreadable spread (NaN) is no evidence of a steady value: untrusted.
    runs["trusted"] = ~above_spread_limit(runs["spread_pct"].fillna(float("inf")), max_spread_pct)
    # The baseline is the median of earlier trusted runs only: noisy nights are no reference.
    runs["_trusted_value"] = runs["value"].where(runs["trusted"])
    grouped = runs.groupby(series, dropna=False, sort=False)
    runs["baseline"] = grouped["_trusted_value"].transform(lambda s: s.expanding().median().shift(1))
    runs["num_previous"] = grouped["_trusted_value"].transform(lambda s: s.notna().cumsum().shift(1, fill_value=0))
    runs = runs.drop(columns="_trusted_value")
    runs["change_pct"] = (runs["value"] - runs["baseline"]) / runs["baseline"] * 100.0
    runs["alert"] = (
        runs["trusted"] & (runs["num_previous"] >= min_previous) & (runs["change_pct"].abs() > threshold_pct)
    )
    runs = runs.sort_values(series + ["finished_at"], kind="stable").reset_index(drop=True)
    runs.attrs.update(metric=metric, by=by, spread_column=spread)
    return runs


def describe_alert(row: pd.Series, metric: str, by: list[str]) -> str:
    """One line: where, what, how much, against what."""
    where = "/".join(str(row[c]) for c in ("host", "checkpoint") if c in row.index)
    what = ", ".join(f"{c}={row[c]}" for c in by if c in row.index and c not in SERIES_KEYS)
    direction = "up" if row["change_pct"] > 0 else "down"
    return (
        f"{row.get('probe', '')} {where}{' [' + what + ']' if what else ''}: {metric} "
        f"{row['value']:.4g} is {direction} {abs(row['change_pct']):.1f}% against the median "
        f"{row['baseline']:.4g} of {int(row['num_previous'])} earlier run(s) "
        f"(spread {row['spread_pct']:.1f}%)"
    )


HEADLINE_METRICS = ("step_s", "kernel_s_per_step", "tok_per_s", "median_s", "pad_fraction")
"""The metric a table is watched by when none is named: time per step first, then any timing."""


def default_metric(frame: pd.DataFrame) -> str:
    numeric = [
        c
        for c in frame.columns
        if c not in KEY_COLUMNS
        and not c.endswith("_json")
        and pd.api.types.is_numeric_dtype(frame[c].dtype)
        and not pd.api.types.is_bool_dtype(frame[c].dtype)
    ]
    for name in HEADLINE_METRICS:
        if name in numeric:
            return name
    timings = [c for c in numeric if c.endswith("_s") and not c.endswith("_per_s")]
    if timings:
        return timings[0]
    if not numeric:
        raise InputError("this table has no numeric column to follow")
    return numeric[0]
