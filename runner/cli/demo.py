"""`labprobe demo load-sample [--store DIR] [--cluster FILE]`: put the demo's recorded sample of real
H200 results (two loans of a lent H200 machine, 2026-12-03 and 2026-12-04; runner.chores.sample)
into the store, so `compare --probe carrier`, `history` and the report have two hosts to compare here."""

from __future__ import annotations

import argparse

from runner.chores.sample import SAMPLE, load_sample
from runner.cli.stores import add_store_option, open_store, optional_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    load = actions.add_parser("load-sample", help="store the recorded H200 carrier sample (flagged recorded)")
    add_store_option(load)
    load.add_argument("--cluster", default="cluster.yaml", help="cluster file (default: ./cluster.yaml)")


def main(args: argparse.Namespace) -> int:
    store = open_store(args.store, optional_cluster(args.cluster))
    added, had = load_sample(store)
    print(f"recorded sample {SAMPLE.name}: {added} job(s) stored, {had} already there (store {store.root})")
    print("  hosts h200-0312 and h200-0412: two loans of one lent NVIDIA H200 machine, 2026-12-03 and 2026-12-04")
    return 0
