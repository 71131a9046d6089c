"""`labprobe store`: look after the store's Delta tables.

    labprobe store check   [--store D] [--cluster F]    tables, versions, files, rows, what is unreadable
    labprobe store compact [--store D] [--cluster F]    fewer, larger files + a log checkpoint per table
    labprobe store vacuum  [--store D] [--cluster F] [--retention-days N] [--dry-run]
    labprobe store migrate [--store D] [--cluster F]    the older Parquet-per-job layout into Delta tables
    labprobe store export DIR [--store D] [--cluster F] every table's current rows as DIR/<table>.parquet
    labprobe store repair  [--store D] [--cluster F]    put right what check finds, keeping every readable row

The store is the cluster file's `store:` (root, storage_options, vacuum_retention_days), or --store.
compact, vacuum, migrate and repair take the store's lock (the sweep's: on an object store a lock
object with a lease, runner.store.lease), so they never run beside a sweep or a purge; vacuum also never deletes a file the newest version uses or one younger
than an hour (runner.store.maintain), so a writer without the lock loses nothing either.
check lists every table, a broken one too, with every unreadable data file and every commit file
that lost actions. Exit 0 done, 1 `check` found unreadable files, 2 bad input (a store path that is
missing or not a store, a data file compact cannot read, a retention that is not a finite number).
export writes plain Parquet for readers that glob a folder (DuckDB's read_parquet, pandas,
pyarrow.dataset), which would also count the files compaction replaced (runner.store.export).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from probes.result import InputError
from runner.cli import stores
from runner.cli.options import days
from runner.cli.outputs import add_mkdir_option, writable_folder, writing
from runner.cli.stores import add_store_option, optional_cluster
from runner.clock import new_run_id
from runner.dispatch.lock import SweepLock
from runner.store import maintain
from runner.store.migrate import legacy_tables, migrate
from runner.store.store import Store
from runner.tables import format_table

ACTIONS = ("check", "compact", "vacuum", "migrate", "export", "repair")
SHOWN_REFUSED = 10
"""Files vacuum left alone (behind a link, on another mount) named one a line; the rest counted."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    helps = {
        "check": "tables, versions, files, rows and anything unreadable or stray",
        "compact": "fewer, larger files and a log checkpoint per table (what each sweep does at its end)",
        "vacuum": "delete files no version of the retention window needs",
        "migrate": "turn the older Parquet-per-job layout into Delta tables",
        "export": "write every table's current rows as plain Parquet, DIR/<table>.parquet",
        "repair": "put right what check finds (a lost log, a cut commit, a replaced file), keeping every readable row",
    }
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    for action in ACTIONS:  # each action's --help shows its own options only
        sub = actions.add_parser(action, help=helps.get(action, ""), description=helps.get(action, ""))
        add_store_option(sub)
        sub.add_argument("--cluster", default="cluster.yaml", help="cluster file (default: ./cluster.yaml, if present)")
        sub.set_defaults(retention_days=None, dry_run=False)
        if action == "export":
            sub.add_argument(
                "folder", type=Path, metavar="DIR", help="the folder to write into: new, empty or an earlier export"
            )
            add_mkdir_option(sub)
        else:
            sub.set_defaults(folder=None)
        if action == "vacuum":
            sub.add_argument(
                "--retention-days",
                type=days,
                metavar="N",
                help="keep N days of time travel (default: the cluster file's "
                f"store.vacuum_retention_days, else {maintain.DEFAULT_RETENTION_DAYS:g})",
            )
            sub.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")


def main(args: argparse.Namespace) -> int:
    store, retention = open_store(args.store, args.cluster)
    if args.retention_days is not None:
        retention = args.retention_days
    if args.action == "export":
        maintain.require_store(store)  # a file or a missing path is no store: one line, no empty export
        return _export(store, args.action, args.folder, mkdir=getattr(args, "mkdir", False))
    if args.action == "vacuum":
        where = "--retention-days" if args.retention_days is not None else "store.vacuum_retention_days"
        maintain.retention_hours(retention, where)  # inf, nan, negative: one line before anything
    if args.action == "check":
        return _check(store)
    if args.action != "migrate":
        maintain.require_store(store)  # before the lock, which would create the folder
    with _locked(store, args.action):
        if args.action == "compact":
            _compact(store)
        elif args.action == "repair":
            return _repair(store)
        elif args.action == "vacuum":
            _vacuum(store, retention, args.dry_run)
        else:
            _migrate(store)
    return 0


def open_store(store: str | None, cluster_file: str) -> tuple[Store, float]:
    """The store named by --store or the cluster file (runner.cli.stores), and the vacuum retention (days)."""
    cluster = optional_cluster(cluster_file, configs=True)
    retention = cluster.spec.store.vacuum_retention_days if cluster is not None else maintain.DEFAULT_RETENTION_DAYS
    return stores.open_store(store, cluster), retention


def _locked(store: Store, action: str) -> SweepLock:
    """The store's lock (the sweep's): a flock on a local store, a lease object on an object store."""
    return SweepLock(store.place, run_id=new_run_id(), plan=f"store {action}")


def _check(store: Store) -> int:
    state = maintain.check(store)
    rows = [
        {
            "table": t.name,
            "version": "broken" if t.version is None else t.version,
            "files": t.files,
            "rows": t.rows,
            "MiB": round(t.bytes / 2**20, 3),
            "other files": "-" if t.other_files is None else t.other_files,
        }
        for t in state.tables
    ]
    print(format_table(rows, title=f"store {store.uri}: {len(rows)} table(s)"))
    if any(t.other_files for t in state.tables):
        print(
            "other files: not in the tables' current version (older versions kept for time travel, "
            "or strays): never read; `labprobe store vacuum` deletes those past the retention"
        )
    for table in state.tables:
        for path, why in table.unreadable:
            print(f"unreadable: {path}: {why}")
    for name in state.strays:
        print(f"stray: tables/{name} is not a store table (readers skip it)")
    for path, what in state.links:
        print(f"link: {path}: {what}: not followed; no chore deletes through it")
    if state.legacy:
        migrated = "jobs" in [t.name for t in state.tables]
        print(
            f"older layout at the root: {', '.join(state.legacy)} "
            + (
                "(migrated: remove them once you no longer need them)"
                if migrated
                else "(not migrated: run `labprobe store migrate`)"
            )
        )
    return 0 if state.ok else 1


def _compact(store: Store) -> None:
    done = maintain.compact(store)
    rows = [
        {"table": name, "files_removed": m["files_removed"], "files_added": m["files_added"]}
        for name, m in done.items()
    ]
    print(format_table(rows, title=f"store {store.uri}: compacted and checkpointed"))


def _vacuum(store: Store, retention_days: float, dry_run: bool) -> None:
    done = maintain.vacuum(store, retention_days, dry_run=dry_run)
    verb = "would delete" if dry_run else "deleted"
    print(
        f"store {store.uri}: {verb} {sum(map(len, done.deleted.values()))} file(s) no version of the last "
        f"{retention_days:g} day(s) needs"
    )
    for name, files in done.deleted.items():
        if files:
            print(f"  {name}: {len(files)}")
    for path, why in done.refused[:SHOWN_REFUSED]:
        print(f"left alone: {path}: {why}")
    if len(done.refused) > SHOWN_REFUSED:
        print(f"left alone: {len(done.refused) - SHOWN_REFUSED} more (`labprobe store check` lists the links)")


def _repair(store: Store) -> int:
    """Exit 0 when every broken table was repaired, 1 when one was left alone (a link or a mount)."""
    if not store.local:
        raise InputError(f"--store: repair reads a local store's files, not {store.uri}")
    from runner.store.repair import repair

    done = repair(store)
    rows = [{"table": r.table, "rows": r.rows, "what": r.what} for r in done if not r.left_alone]
    empty = f"store {store.uri}: " + ("nothing repaired" if done else "nothing to repair")
    print(format_table(rows, title=f"store {store.uri}: repaired") if rows else empty)
    for r in done:
        if r.left_alone:
            print(f"left alone: {r.table}: {r.what}")
    if any(r.left_alone for r in done):
        print("nothing was deleted; the tables left alone stay broken: `labprobe store check` lists the links")
        return 1
    print("nothing was deleted; `labprobe store check` should now exit 0")
    return 0


def _migrate(store: Store) -> None:
    store.require_root()
    if not legacy_tables(store.place):
        raise InputError(f"store {store.uri}: no tables of the older layout (jobs/host=.../) to migrate")
    report = migrate(store)
    rows = [{"table": name, "files": report.files[name], "rows_added": report.rows[name]} for name in report.rows]
    print(format_table(rows, title=f"store {store.uri}: migrated into {store.place.join('tables')}"))
    for path, why in report.skipped:
        print(f"skipped: {path}: {why}")
    print("the older files are left in place; remove them when you no longer need them")


def _export(store: Store, action: str, folder: Path | None, *, mkdir: bool = False) -> int:
    if action != "export":
        raise InputError(f"{folder}: only `store export` takes a folder")
    if folder is None:
        raise InputError("export: name the folder to write into (labprobe store export DIR)")
    from runner.store.export import export

    writable_folder(folder, what="export", mkdir=mkdir)  # its parent must exist (or --mkdir); writable
    with writing(folder, what="export"):
        done = export(store, folder)
    rows = [{"table": e.name, "version": e.version, "rows": e.rows, "file": e.path.name} for e in done]
    print(format_table(rows, title=f"store {store.uri}: exported into {folder}"))
    return 0
