"""`labprobe purge`, the command's half: its options, the tables it prints, its exit code.

The purge itself (a task on each host, the plan and outcome stored) is runner.chores.purge;
what is refused and why is docs/purge.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from probes.result import InputError
from runner.chores.locks import store_lock
from runner.chores.plans import StoredPlan, load_plan, newest_plan_id
from runner.chores.purge import (
    Report,
    check_glob,
    host_summary,
    purge,
    recover_all,
    runs_roots,
    store_phase,
)
from runner.cli.options import positive_seconds
from runner.cli.stores import add_store_option, open_store
from runner.clock import new_run_id
from runner.gpu.idle import Thresholds
from runner.hosts.nodes import connect, warn_embedded
from runner.lab.cluster import load_cluster
from runner.log import foreign_output_to
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
    parser.add_argument(
        "--yes",
        action="store_true",
        help="carry out a stored plan (--plan, or on a terminal the newest after a confirmation); "
        "without it only the plan is printed and stored, under its id",
    )
    parser.add_argument("--plan", metavar="ID", help="with --yes: the dry run's plan id to carry out, exactly")
    parser.add_argument(
        "--recover",
        action="store_true",
        help="finish or undo what an interrupted purge left set aside (.labprobe-purging-*), and store it",
    )
    add_store_option(parser)
    parser.add_argument("--address", metavar="A", help="Ray address (default: the cluster file's)")
    parser.add_argument(
        "--timeout-s",
        type=positive_seconds,
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
            "path / reason": r["path"] if r["action"] in ("remove", "removed") and not r["reason"] else r["reason"],
        }
        for h, host_rows in rows.items()
        for r in host_rows
    ]
    title = {
        "purge": f"== purge outcome (plan {report.plan_id})",
        "recover": "== purge --recover: what interrupted purges left set aside",
        "dry-run": "== purge plan (dry run: nothing deleted; --yes --plan ID deletes each `remove`)",
    }[report.mode]
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
    if args.plan is not None and not args.yes:
        raise InputError("--plan: carried out with --yes (without --yes, `labprobe purge` makes a new plan)")
    if args.recover and args.yes:
        raise InputError("--recover: runs alone, not with --yes")
    if args.yes and (args.host or args.run != "*"):
        raise InputError("--host/--run choose what a dry run plans; --yes carries out a stored plan as it was shown")
    cluster = load_cluster(args.cluster)
    roots = runs_roots(cluster, args.host)
    check_glob(args.run)
    store = open_store(args.store, cluster)
    quiets = {h: _quiet_s(cluster, h) for h in cluster.hosts}
    run_id = new_run_id()
    what = "purge --recover" if args.recover else ("purge --yes" if args.yes else "purge (dry run)")
    ray_log = store.place.log_file("ray-purge.log")
    with store_lock(store.place, run_id, what):
        plan = _chosen_plan(args, cluster, store) if args.yes else None
        out = _json_stream() if args.json else sys.stdout
        with store.place.keeping_log(ray_log, "ray-purge.log"), foreign_output_to(ray_log):  # as sweep
            _start_ray(args.address or cluster.spec.ray.address, set(plan.roots if plan else roots))
        if args.recover:
            report = recover_all(roots, timeout_s=args.timeout_s, run_id=run_id)
        else:
            report = purge(
                plan.roots if plan else roots,
                plan.run_glob if plan else args.run,
                yes=args.yes,
                timeout_s=args.timeout_s,
                on_plan=lambda planned: store_phase(store, planned, "plan"),
                shown=plan.shown if plan else None,
                quiets=quiets,
                plan_id=plan.plan_id if plan else "",
                run_id=run_id,
            )
        try:
            if report.yes:
                store_phase(store, report, "outcome")
        finally:
            _show(report, store, args.json, out)
    return 0 if report.ok else 1


def _quiet_s(cluster: Any, host: str) -> float:
    """The host's runs_quiet_min (its idle thresholds'), in seconds."""
    return Thresholds.from_cluster(cluster.hosts[host].idle).runs_fresh_min * 60.0


def _chosen_plan(args: argparse.Namespace, cluster: Any, store: Store) -> StoredPlan:
    """--plan ID, or on a terminal the newest dry run's plan once the operator confirms it."""
    runs_dirs = {h: cluster.runs_dir(h) for h in cluster.hosts}
    if args.plan is not None:
        return load_plan(store, args.plan, runs_dirs)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError("--yes: give --plan ID, the id the dry run printed (only a terminal is asked to confirm)")
    plan = load_plan(store, newest_plan_id(store), runs_dirs)
    num = sum(len(paths) for paths in plan.shown.values())
    print(
        f"plan {plan.plan_id} (dry run of {plan.finished_at}): {num} checkpoints/ to remove, {human(plan.num_bytes)}, "
        f"on {', '.join(plan.roots)}"
    )
    if input("carry out exactly this plan? [y/N] ").strip().lower() not in ("y", "yes"):
        raise InputError(f"plan {plan.plan_id} not confirmed: nothing deleted")
    return plan


def _start_ray(address: str | None, hosts: set[str]) -> None:
    """As `sweep` and `idle`: no address (or `local`) is the embedded Ray on this machine, its one
    node labelled `local`, never posing as another host (the head's runs root is not this one's)."""
    import ray

    embedded = address in (None, "local") and not ray.is_initialized()
    if embedded:
        tmp = os.environ.get("TMPDIR")
        if tmp and not (os.path.isdir(tmp) and os.access(tmp, os.W_OK | os.X_OK)):
            raise InputError(f"TMPDIR {tmp}: not a writable directory (the embedded Ray keeps its session there)")
    try:
        connect(address)
    except (OSError, RuntimeError, ValueError) as exc:
        raise InputError(f"Ray could not start: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    if embedded:
        warn_embedded("purge", address, hosts, "{hosts} will read as unreachable")


_REAL_STDOUT: list[TextIO] = []  # fd 1 as it was, once --json has pointed fd 1 at stderr


def _json_stream() -> TextIO:
    """Where --json's one object goes: the real stdout, while fd 1 from now on is stderr, so that
    nothing else (Ray's banners, its coloured worker-death lines, from C++ or Python, now or at
    exit) lands in the JSON. Under a capture with no fd (tests), sys.stdout itself."""
    if _REAL_STDOUT:
        return _REAL_STDOUT[0]
    try:
        if sys.stdout.fileno() != 1:
            return sys.stdout
    except (OSError, ValueError, AttributeError):
        return sys.stdout
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    _REAL_STDOUT.append(os.fdopen(saved, "w", encoding="utf-8"))
    return _REAL_STDOUT[0]


def _show(report: Report, store: Store, as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump(
            {
                "mode": report.mode,
                "yes": report.yes,
                "plan_id": report.plan_id or (report.run_id if report.mode == "dry-run" else ""),
                "plan": report.plan,
                "outcome": report.outcome,
                "filesystems": report.filesystems,
                "failures": report.failures,
                "summary": {h: host_summary(report, h) for h in report.roots},
                "store": str(store.root),
                "run_id": report.run_id,
            },
            out,
            indent=1,
            default=str,
        )
        print(file=out)
        out.flush()
        return
    encoding = (getattr(out, "encoding", None) or "utf-8").lower().replace("-", "")
    if encoding != "utf8" and hasattr(out, "reconfigure"):  # a forced-ASCII locale: é as \xe9, never a crash
        out.reconfigure(errors="backslashreplace")
    print(render(report), file=out)
    print(
        f"\nstored: {store.table_uri('purge.actions')} (run_id {report.run_id})", file=out
    )  # the Delta table's folder
    if report.mode == "dry-run":
        print(f"plan id: {report.run_id}  (`labprobe purge --yes --plan {report.run_id}` deletes exactly this plan)")
