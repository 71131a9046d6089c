"""`labprobe compare`: how do the hosts compare on the same work? Checkpoints by hosts, from the store."""

from __future__ import annotations

import argparse
import json
import sys

from runner.analysis.compare import compare, render
from runner.cli.options import plot_file
from runner.cli.outputs import add_mkdir_option, writable_file, writing
from runner.cli.stores import add_store_option, open_store, optional_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--probe", required=True, help="the probe whose results to compare")
    parser.add_argument(
        "--table",
        help="the probe's table, `summary` (its jobs' summary figures) "
        "or `jobs` (default: the table of the probe's answer)",
    )
    parser.add_argument("--metric", help="numeric column to compare (default: the probe's answer)")
    parser.add_argument("--baseline", help="host the ratios are relative to (default: the first host)")
    parser.add_argument(
        "--variant",
        action="append",
        metavar="NAME",
        help="only rows of this variant (repeatable; default: every variant, each its own row)",
    )
    parser.add_argument("--host", action="append", metavar="HOST", help="only this host (repeatable)")
    parser.add_argument("--checkpoint", action="append", metavar="NAME", help="only this checkpoint (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--plot", type=plot_file, help="write a PNG bar chart here")
    add_mkdir_option(parser)
    add_store_option(parser)
    parser.add_argument("--cluster", default="cluster.yaml", help="cluster file (store root, host order)")


def main(args: argparse.Namespace) -> int:
    if args.plot is not None:  # before the work: a plot that cannot be written is said first, in one line
        writable_file(args.plot, what="--plot", mkdir=args.mkdir)
    cluster = optional_cluster(args.cluster)  # plans are not run here: no probe imports
    store = open_store(args.store, cluster)
    result = compare(
        store,
        args.probe,
        table=args.table,
        metric=args.metric,
        baseline=args.baseline,
        host_order=list(cluster.hosts) if cluster is not None else [],
        variants=args.variant,
        hosts=args.host,
        checkpoints=args.checkpoint,
        budget=cluster.spec.budget if cluster is not None else None,
    )
    if args.json:
        json.dump(result.to_json_dict(), sys.stdout, indent=1, default=str)
        print()
    else:
        print(render(result))
    if args.plot is not None:
        from runner.analysis.compare_plot import plot_comparison

        with writing(args.plot, what="--plot"):
            plot_comparison(result, args.plot)
        print(f"plot: {args.plot}", file=sys.stderr)
    return 0
