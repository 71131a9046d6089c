"""`labprobe history --probe P`: one metric over past runs, per host, with drift alerts."""

from __future__ import annotations

import argparse
import json
import sys

from runner.analysis.drift import (
    default_metric,
    describe_alert,
    drift_table,
)
from runner.analysis.history import choose_table, newest_drifted, plot_labels, render, select_rows
from runner.cli.options import add_store_options, percent, plot_file
from runner.cli.outputs import add_mkdir_option, writable_file, writing
from runner.cli.stores import open_store, optional_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", required=True, metavar="P", help="the probe whose results to follow")
    parser.add_argument("--table", metavar="T", help="the probe's table (default: its only or main one)")
    parser.add_argument("--host", action="append", metavar="HOST", help="only this host (repeatable)")
    parser.add_argument("--checkpoint", action="append", metavar="NAME", help="only this checkpoint (repeatable)")
    parser.add_argument(
        "--variant", action="append", metavar="NAME", help="only rows of this variant (repeatable; default: every one)"
    )
    parser.add_argument("--metric", metavar="M", help="the column to follow (default: step_s, or the first timing)")
    parser.add_argument(
        "--by",
        nargs="+",
        metavar="COL",
        help="the columns that say what a row measures (default: its text and shape columns)",
    )
    parser.add_argument(
        "--threshold-pct",
        type=percent,
        default=3.0,
        metavar="PCT",
        help="alert when a value moves more than this against the median of earlier runs (default: 3)",
    )
    parser.add_argument(
        "--max-spread-pct",
        type=percent,
        default=2.0,
        metavar="PCT",
        help="trust a value only when its spread is at most this (default: 2)",
    )
    parser.add_argument("--plot", type=plot_file, metavar="FILE", help="also draw the metric over time into this PNG")
    add_mkdir_option(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    add_store_options(parser)


def main(args: argparse.Namespace) -> int:
    if args.plot:  # before the work: a plot that cannot be written is said first, in one line
        writable_file(args.plot, what="--plot", mkdir=args.mkdir)
    store = open_store(args.store, optional_cluster(args.cluster))
    table = choose_table(store, args.probe, args.table)
    frame = select_rows(
        store.read(table), hosts=args.host, checkpoints=args.checkpoint, variants=args.variant, table=table
    )
    metric = args.metric or default_metric(frame)
    drift = drift_table(frame, metric, by=args.by, threshold_pct=args.threshold_pct, max_spread_pct=args.max_spread_pct)
    by = drift.attrs["by"]
    alerts = [describe_alert(row, metric, by) for _, row in drift[drift["alert"]].iterrows()]
    if args.plot:
        from runner.analysis import plots

        figure = plots.history_lines(
            drift, metric, label_columns=plot_labels(drift, by), title=f"{table}: {metric} over runs"
        )
        with writing(args.plot, what="--plot"):
            plots.save(figure, args.plot)
    if args.json:
        json.dump(
            {
                "table": table,
                "metric": metric,
                "by": by,
                "spread_column": drift.attrs["spread_column"],
                "threshold_pct": args.threshold_pct,
                "max_spread_pct": args.max_spread_pct,
                "rows": json.loads(drift.to_json(orient="records", date_format="iso")),
                "alerts": alerts,
            },
            sys.stdout,
            indent=1,
        )
        print()
    else:
        print(render(drift, table, metric, by, alerts, plot=args.plot))
    return 1 if newest_drifted(drift, by) else 0
