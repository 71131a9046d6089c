"""`labprobe history --probe P`: one metric over past runs, per host, with drift alerts.

Reads a probe table from the store, follows one metric (default: the table's headline timing,
`step_s` where there is one) per series (host, checkpoint fingerprint, probe config hash, and the
row's identity columns), and flags a run whose value moved by more than --threshold-pct against
the median of that series' earlier runs, when its spread is at most --max-spread-pct
(runner/drift.py has the rule). Prints a table per series (or --json), optionally a plot.
Exit 1 when the newest run of some series drifted, so a cron job or CI step can act on it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from probes.result import InputError
from runner.drift import SERIES_KEYS, default_metric, describe_alert, drift_table
from runner.options import plot_file
from runner.store import Store
from runner.tables import format_table

DEFAULT_TABLES = {"carrier": "carriers", "profile": "scaling", "padding": "strategies", "bucket": "sweep"}
"""The table followed when a probe wrote several and --table is not given."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", required=True, metavar="P", help="the probe whose results to follow")
    parser.add_argument("--table", metavar="T", help="the probe's table (default: its only or main one)")
    parser.add_argument("--host", metavar="H", help="only this host")
    parser.add_argument("--checkpoint", metavar="C", help="only this checkpoint")
    parser.add_argument("--metric", metavar="M", help="the column to follow (default: step_s, or the first timing)")
    parser.add_argument("--by", nargs="+", metavar="COL",
                        help="the columns that say what a row measures (default: its text and shape columns)")
    parser.add_argument("--threshold-pct", type=float, default=3.0, metavar="PCT",
                        help="alert when a value moves more than this against the median of earlier runs (default: 3)")
    parser.add_argument("--max-spread-pct", type=float, default=2.0, metavar="PCT",
                        help="trust a value only when its spread is at most this (default: 2)")
    parser.add_argument("--plot", type=plot_file, metavar="FILE", help="also draw the metric over time into this PNG")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    parser.add_argument("--store", type=Path, metavar="D",
                        help="the store (default: the cluster file's, else ./results)")
    parser.add_argument("--cluster", type=Path, default=Path("cluster.yaml"), metavar="F",
                        help="the cluster file naming the store (default: ./cluster.yaml, if present)")


def main(args: argparse.Namespace) -> int:
    for name in ("threshold_pct", "max_spread_pct"):
        if not getattr(args, name) >= 0:
            raise InputError(f"--{name.replace('_', '-')}: must be >= 0, got {getattr(args, name)}")
    store = Store(resolve_store(args.store, args.cluster))
    table = choose_table(store, args.probe, args.table)
    frame = select_rows(store.read(table), host=args.host, checkpoint=args.checkpoint, table=table)
    metric = args.metric or default_metric(frame)
    drift = drift_table(frame, metric, by=args.by, threshold_pct=args.threshold_pct,
                        max_spread_pct=args.max_spread_pct)
    by = drift.attrs["by"]
    alerts = [describe_alert(row, metric, by) for _, row in drift[drift["alert"]].iterrows()]
    if args.plot:
        from runner import plots
        label = ["host", "checkpoint"] + [c for c in by if c not in SERIES_KEYS]
        plots.save(plots.history_lines(drift, metric, label_columns=label,
                                       title=f"{table}: {metric} over runs"), args.plot)
    if args.json:
        json.dump({"table": table, "metric": metric, "by": by, "spread_column": drift.attrs["spread_column"],
                   "threshold_pct": args.threshold_pct, "max_spread_pct": args.max_spread_pct,
                   "rows": json.loads(drift.to_json(orient="records", date_format="iso")),
                   "alerts": alerts}, sys.stdout, indent=1)
        print()
    else:
        print(render(drift, table, metric, by, alerts, plot=args.plot))
    return 1 if newest_drifted(drift, by) else 0


def resolve_store(store: Path | None, cluster: Path) -> Path:
    if store is not None:
        return store
    if cluster.is_file():
        from runner.cluster import load_cluster
        return load_cluster(cluster).store_root()
    return Path("results")


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
    if DEFAULT_TABLES.get(probe) in names:
        return f"{probe}.{DEFAULT_TABLES[probe]}"
    raise InputError(f"--table: probe {probe!r} has several tables, name one: {', '.join(names)}")


def select_rows(frame: pd.DataFrame, *, host: str | None, checkpoint: str | None, table: str) -> pd.DataFrame:
    for column, value in (("host", host), ("checkpoint", checkpoint)):
        if value is None:
            continue
        known = sorted(frame[column].astype(str).unique())
        if value not in known:
            raise InputError(f"--{column}: no rows for {column} {value!r} in {table} ({column}s: {', '.join(known)})")
        frame = frame[frame[column].astype(str) == value]
    return frame


def newest_drifted(drift: pd.DataFrame, by: list[str]) -> bool:
    if drift.empty:
        return False
    series = [c for c in SERIES_KEYS if c in drift] + [c for c in by if c not in SERIES_KEYS]
    newest = drift.sort_values("finished_at", kind="stable").groupby(series, dropna=False).tail(1)
    return bool(newest["alert"].any())


def render(drift: pd.DataFrame, table: str, metric: str, by: list[str], alerts: list[str],
           *, plot: Path | None) -> str:
    spread = drift.attrs["spread_column"]
    parts = [f"{table}: {metric} over {drift['run_id'].nunique()} run(s)"
             + (f" (spread from {spread})" if spread else " (no spread column: values taken as exact)")]
    series = ["host", "checkpoint"] + [c for c in by if c not in SERIES_KEYS]
    for key, rows in drift.groupby(series + ["checkpoint_fp", "config_hash"], sort=True, dropna=False):
        title = "== " + " ".join(f"{c}={v}" for c, v in zip(series + ["fp", "config"], key))
        records = [{"finished_at": r.finished_at.strftime("%Y-%m-%d %H:%M"), "run_id": r.run_id,
                    metric: r.value, "spread_pct": r.spread_pct, "baseline": _or_none(r.baseline),
                    "change_pct": _or_none(r.change_pct), "alert": "DRIFT" if r.alert else ""}
                   for r in rows.itertuples()]
        parts.append(format_table(records, title=title))
    parts.append("drift alerts:\n" + "\n".join(f"  {a}" for a in alerts) if alerts else "drift alerts: none")
    if plot:
        parts.append(f"plot: {plot}")
    return "\n\n".join(parts)


def _or_none(value: float) -> float | None:
    """No earlier run, no baseline: shown as None rather than nan."""
    return None if pd.isna(value) else float(value)
