"""`labprobe purge`, the command's half: its options, the tables it prints, its exit code.

The purge itself (a task on each host, the plan and outcome stored) is runner/chores/purge.py;
what is refused and why is docs/purge.md.
"""

from __future__ import annotations

import argparse
import json
import sys

from probes.result import InputError
from runner.chores.purge import (
    Report,
    check_glob,
    host_summary,
    purge,
    runs_roots,
    store_phase,
)
from runner.hosts.nodes import connect, warn_embedded
from runner.lab.cluster import load_cluster
from runner.log import foreign_output_to, log_path
from runner.store.store import Store
from runner.tables import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        default="cluster.yaml",
        metavar="F",
        help="the lab's cluster file: hosts and their runs_root, the store (default: %(default)s)",
    )
    parser.add_argument(
        "--host", action="append", metavar="H", help="only this host (repeatable); default: every host with a runs_root"
    )
    parser.add_argument(
        "--run", default="*", metavar="GLOB", help="only runs whose directory name matches GLOB (default: every run)"
    )
    parser.add_argument("--yes", action="store_true", help="delete; without it only the plan is printed and stored")
    parser.add_argument("--store", metavar="D", help="store root (default: the cluster file's)")
    parser.add_argument("--address", metavar="A", help="Ray address (default: the cluster file's)")
    parser.add_argument(
        "--timeout-s",
        type=float,
        default=3600.0,
        metavar="S",
        help="give up on a host after S seconds (default: %(default)s)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")


def human(num_bytes: int | None) -> str:
    if num_bytes is None:
        return "?"
    size, sign = float(abs(num_bytes)), "-" if num_bytes < 0 else ""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{sign}{size:.0f} {unit}" if unit == "B" else f"{sign}{size:.1f} {unit}"
        size /= 1024
    return f"{num_bytes} B"


def render(report: Report) -> str:
    rows = report.outcome if report.yes else report.plan
    table = [
        {
            "host": h,
            "run": r["run"],
            "action": r["action"],
            "size": human(r["alloc_bytes"]),
            "files": r["num_files"],
            **({"adapter": _verified(r["adapter_digests_verified"])} if report.yes else {}),
            "path / reason": r["path"] if r["action"] in ("remove", "removed") else r["reason"],
        }
        for h, host_rows in rows.items()
        for r in host_rows
    ]
    title = (
        "== purge outcome" if report.yes else ("== purge plan (dry run: nothing deleted; --yes deletes each `remove`)")
    )
    parts = [format_table(table, title=title)]
    fs = [
        {
            "host": h,
            "fs": f["fs"],
            "fstype": f["fstype"],
            "mount": f["mount"],
            "planned": human(f["planned_bytes"]),
            **({"removed": human(f["removed_bytes"]), "freed": human(f["freed_bytes"])} if report.yes else {}),
            "note": f["note"],
        }
        for h, host_fs in report.filesystems.items()
        for f in host_fs
    ]
    if fs:
        parts.append(format_table(fs, title="== filesystems"))
    if report.failures:
        parts.append("== hosts that failed\n" + "\n".join(f"  {h}: {why}" for h, why in report.failures.items()))
    return "\n\n".join(parts)


def _verified(value: bool | None) -> str:
    return {True: "verified", False: "CHANGED", None: "not verified"}[value]


def main(args: argparse.Namespace) -> int:

    if not args.timeout_s > 0:
        raise InputError(f"--timeout-s: must be > 0 (got {args.timeout_s})")
    cluster = load_cluster(args.cluster)
    roots = runs_roots(cluster, args.host)
    check_glob(args.run)
    store = Store(args.store or cluster.store_root())
    address = args.address or cluster.spec.ray.address
    # As `sweep` and `idle`: no address (or `local`) is the embedded Ray on this machine, its one
    # node labelled `local`, never posing as another host (the head's runs root is not this one's).
    import ray

    embedded = address in (None, "local") and not ray.is_initialized()
    with foreign_output_to(log_path(store.root, "ray-purge.log")):  # Ray's banners off the terminal, as sweep
        connect(address)
        if embedded:
            warn_embedded("purge", address, set(roots), "{hosts} will read as unreachable")
        report = purge(
            roots,
            args.run,
            yes=args.yes,
            timeout_s=args.timeout_s,
            on_plan=lambda planned: store_phase(store, planned, "plan"),
        )
    if report.yes:
        store_phase(store, report, "outcome")
    run_id = report.run_id
    if args.json:
        json.dump(
            {
                "yes": report.yes,
                "plan": report.plan,
                "outcome": report.outcome,
                "filesystems": report.filesystems,
                "failures": report.failures,
                "summary": {h: host_summary(report, h) for h in report.roots},
                "store": str(store.root),
                "run_id": run_id,
            },
            sys.stdout,
            indent=1,
            default=str,
        )
        print()
    else:
        print(render(report))
        print(f"\nstored: {store.table_uri('purge.actions')} (run_id {run_id})")  # the Delta table's folder
    return 0 if report.ok else 1
