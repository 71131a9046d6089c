"""`labprobe status`: what is running on the store: the sweep holding its lock (run, plan, pid, host,
start), its jobs done and left, the newest one stored; with none running, the newest run's counts.
Read-only: safe beside a running sweep."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from probes.result import InputError
from runner.analysis.report_runs import known_runs, night_line
from runner.cli.stores import add_store_option, open_store, optional_cluster
from runner.dispatch.status import render, sweep_status


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_store_option(parser)
    parser.add_argument(
        "--cluster", default="cluster.yaml", metavar="FILE", help="cluster file (default: ./cluster.yaml)"
    )


def main(args: argparse.Namespace) -> int:
    store = open_store(args.store, optional_cluster(args.cluster))
    if store.local and not Path(store.root).is_dir():
        raise InputError(f"store {store.root}: no such directory")
    store.require_root()  # an object store that does not answer: what its server said, one line
    newest = known_runs(store, store.jobs(columns=["run_id", "finished_at"]))  # a night that stored no job too
    status = sweep_status(store, newest=newest[-1] if newest else None)
    night = night_line(store, status.run_id, status.running) if status.run_id else None
    print(render(dataclasses.replace(status, night=night), store.uri))
    return 0
