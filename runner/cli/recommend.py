"""`labprobe recommend`: which carrier, on which host, how many hours for the lab's budget, with which stack,
from what the store holds; the verdict in its last line (runner.analysis.recommend)."""

from __future__ import annotations

import argparse
import json
import sys

from probes.result import InputError
from runner.analysis.recommend import from_store
from runner.analysis.recommend_text import render
from runner.cli.options import add_store_options
from runner.cli.stores import open_store, optional_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", action="append", metavar="HOST", help="only this host (repeatable)")
    parser.add_argument("--checkpoint", action="append", metavar="NAME", help="only this carrier (repeatable)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    add_store_options(parser)


def main(args: argparse.Namespace) -> int:
    cluster = optional_cluster(args.cluster)  # the budget and the plans' names: no probe config built
    if cluster is None:
        raise InputError(f"--cluster {args.cluster}: no such file (its `budget` is what the hours price)")
    store = open_store(args.store, cluster)
    hosts = set(args.host) if args.host else None
    checkpoints = set(args.checkpoint) if args.checkpoint else None
    result = from_store(store, cluster, hosts=hosts, checkpoints=checkpoints)
    if args.json:
        json.dump(result.to_json_dict(), sys.stdout, indent=1, default=str)
        print()
    else:
        print(render(result, store.root))
    return 0 if result.verdict else 1
