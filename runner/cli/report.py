"""`labprobe report`: the morning report of any run the store knows, as `sweep --report` writes it.

    labprobe report [--run ID | --night YYYY-MM-DD] [--out FILE] [--store D] [--cluster F]

No --run or --night: the newest run. --night: the last run started from noon of that date to noon of
the next day (local time). Writes `<store>/reports/<run_id>.html` (or --out: its folder must exist, or pass --mkdir) and prints a few lines
and the path. A rerun whose jobs were all done shows the stored answers it relied on, each marked
with its run (runner.analysis.report_data). Exit 0, 2 on bad input (an unknown run, a bad date).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probes.result import InputError
from runner.analysis.report import write_report
from runner.analysis.report_runs import pick_run
from runner.cli.options import add_store_options
from runner.cli.outputs import add_mkdir_option, writable_file, writing
from runner.cli.stores import open_store, optional_cluster


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--run", metavar="ID", help="the run's id (as the sweep printed it; default: the newest run)")
    which.add_argument("--night", metavar="DATE", help="the last run of the night of DATE (YYYY-MM-DD, local time)")
    parser.add_argument("--out", type=Path, metavar="FILE", help="write here (default: <store>/reports/<run id>.html)")
    add_mkdir_option(parser)
    add_store_options(parser)


def main(args: argparse.Namespace) -> int:
    cluster = optional_cluster(args.cluster)  # its budget: the verdict the report leads with
    store = open_store(args.store, cluster)
    if store.local and Path(store.root).is_file():  # else it reads as an empty store: "run labprobe sweep first"
        raise InputError(f"store {store.root}: is a file, not a store directory")
    run_id = pick_run(store, store.jobs(columns=["run_id", "finished_at"]), run=args.run, night=args.night)
    path = None  # inside the store (its reports/ folder is made when missing): an object on an object store
    if args.out is not None:
        path = writable_file(args.out, what="--out", mkdir=args.mkdir)
    elif store.local:
        path = writable_file(store.root / store.place.report(run_id), what="report", make_under=store.root)
    with writing(path or store.place.join(store.place.report(run_id)), what="report"):
        path, text = write_report(store, run_id, path=path, cluster=cluster)
    print(text)
    print(f"report: {path}")
    return 0
