"""`labprobe history --probe P`: one metric over past runs, per host, with drift alerts.

Reads a probe table from the store, follows one metric (default: the table's headline timing,
`step_s` where there is one) per series (host, checkpoint fingerprint, probe config hash, and the
row's identity columns), and flags a run whose value moved by more than --threshold-pct against
the median of that series' earlier runs, when its spread is at most --max-spread-pct
(runner.analysis.drift has the rule). Prints a table per series (or --json), optionally a plot.
Exit 1 when the newest run of some series drifted, so a cron job or CI step can act on it.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from probes import presentation
from probes.result import InputError
from runner.analysis.compare import of_variants, only
from runner.analysis.drift import SERIES_KEYS
from runner.store.store import Store
from runner.tables import format_table


def choose_table(store: Store, probe: str, table: str | None) -> str:
    names = [n.split(".", 1)[1] for n in store.table_names() if n.startswith(f"{probe}.")]
    if not names:
        raise InputError(f"--probe: no results of probe {probe!r} in the store {store.root}")
    if table is not None:
        if table not in names:
            raise InputError(f"--table: probe {probe!r} has no table {table!r} (tables: {', '.join(names)})")
        return f"{probe}.{table}"
    if len(names) == 1:
        return f"{probe}.{names[0]}"
    followed = presentation(probe).history_table  # the probe's own pick among its tables
    if followed in names:
        return f"{probe}.{followed}"
    raise InputError(f"--table: probe {probe!r} has several tables, name one: {', '.join(names)}")


def select_rows(
    frame: pd.DataFrame,
    *,
    hosts: list[str] | None,
    checkpoints: list[str] | None,
    variants: list[str] | None = None,
    table: str,
) -> pd.DataFrame:
    """The rows of these hosts, checkpoints and variants (all where None), as `labprobe compare` filters them."""
    frame = only(frame, hosts=hosts, checkpoints=checkpoints, what=table)
    probe, name = table.split(".", 1)
    return of_variants(frame, probe, name, variants)


def newest_drifted(drift: pd.DataFrame, by: list[str]) -> bool:
    if drift.empty:
        return False
    series = [c for c in SERIES_KEYS if c in drift] + [c for c in by if c not in SERIES_KEYS]
    newest = drift.sort_values("finished_at", kind="stable").groupby(series, dropna=False).tail(1)
    return bool(newest["alert"].any())


def render(drift: pd.DataFrame, table: str, metric: str, by: list[str], alerts: list[str], *, plot: Path | None) -> str:
    spread = drift.attrs["spread_column"]
    parts = [
        f"{table}: {metric} over {drift['run_id'].nunique()} run(s)"
        + (f" (spread from {spread})" if spread else " (no spread column: values taken as exact)")
    ]
    series = ["host", "checkpoint"] + [c for c in by if c not in SERIES_KEYS]
    variant = "variant" in drift.columns and drift["variant"].notna().any()
    for key, rows in drift.groupby(series + ["checkpoint_fp", "config_hash"], sort=True, dropna=False):
        title = "== " + " ".join(f"{c}={v}" for c, v in zip(series + ["fp", "config"], key))
        if variant:  # each variant its own series: its rows together, its own baseline
            rows = rows.sort_values(["variant", "finished_at"], kind="stable")
        records = [
            {
                **({"variant": r.variant} if variant else {}),
                "finished_at": r.finished_at.strftime("%Y-%m-%d %H:%M"),
                "run_id": r.run_id,
                metric: r.value,
                "spread_pct": r.spread_pct,
                "baseline": _or_none(r.baseline),
                "change_pct": _or_none(r.change_pct),
                "alert": "DRIFT" if r.alert else "",
            }
            for r in rows.itertuples()
        ]
        parts.append(format_table(records, title=title))
    parts.append("drift alerts:\n" + "\n".join(f"  {a}" for a in alerts) if alerts else "drift alerts: none")
    if plot:
        parts.append(f"plot: {plot}")
    return "\n\n".join(parts)


def _or_none(value: float) -> float | None:
    """No earlier run, no baseline: shown as None rather than nan."""
    return None if pd.isna(value) else float(value)


def plot_labels(drift: pd.DataFrame, by: list[str]) -> list[str]:
    """The columns one plotted line stands for: host and checkpoint, the variant, the other identity columns."""
    variant = ["variant"] if "variant" in drift.columns and drift["variant"].notna().any() else []
    return ["host", "checkpoint", *variant] + [c for c in by if c not in SERIES_KEYS]
