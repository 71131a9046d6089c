"""`labprobe status`: what is running on the store: the sweep holding its lock (run, plan, pid, host,
start), its jobs done and left, the newest one stored; with none running, the newest run's counts.
Read-only: safe beside a running sweep."""

from __future__ import annotations

import argparse
from pathlib import Path

from probes.result import InputError
from runner.dispatch.status import render, sweep_status
from runner.lab.cluster import load_cluster
from runner.store.store import Store


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--store", type=Path, metavar="DIR", help="store root (default: the cluster file's store.root)")
    parser.add_argument(
        "--cluster", default="cluster.yaml", metavar="FILE", help="cluster file (default: ./cluster.yaml)"
    )


def main(args: argparse.Namespace) -> int:
    root = args.store
    if root is None:
        root = load_cluster(args.cluster).store_root() if Path(args.cluster).is_file() else Path("results")
    store = Store(root)
    if store.local and not Path(store.root).is_dir():
        raise InputError(f"store {store.root}: no such directory")
    print(render(sweep_status(store), store.root))
    return 0
