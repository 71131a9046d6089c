"""Keeping the store fast and honest: check, compact (+ log checkpoint), vacuum.

- compact: per table, small files are rewritten into fewer (new files; one commit swaps them for
  the old, which stay on disk for time travel), then a log checkpoint is written, so opening a table
  reads one Parquet checkpoint instead of replaying every commit. Run after every sweep.
- vacuum: delete files no table version younger than the retention needs (the lab's
  `store.vacuum_retention_days`, default 7: a week of time travel). Also removes stray files that
  are older than the retention: delta-rs deletes what its log does not know.
- check: per table its version, live files, rows, bytes, every live file that cannot be read and
  every commit file that lost actions (runner.store.logcheck); a table whose log cannot be read
  at all is listed as broken, never stopping the others; folders under tables/ that are not tables;
  a leftover older-layout tree.

Vacuum never deletes a file the table's newest version references, nor one younger than
VACUUM_MIN_AGE_S: the newest version is read again after the candidates are listed, so a commit
that landed meanwhile keeps its files, and a writer's data file that is not committed yet (written
just before its commit) is too young to go. The CLI also takes the store's lock (runner.cli.store).
"""

from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.fs as pa_fs
from deltalake.exceptions import DeltaError

from probes.result import InputError
from runner.store import delta, owned
from runner.store.logcheck import commit_problems
from runner.store.migrate import legacy_tables
from runner.store.nofollow import readable

DEFAULT_RETENTION_DAYS = 7.0
VACUUM_MIN_AGE_S = 3600.0
"""Vacuum leaves any file younger than this, whatever the retention: a writer that does not hold the
store's lock (another client, a store on an object store, where there is no lock) writes its data
file before the commit that makes it live; an hour is far longer than any write takes."""


@dataclasses.dataclass
class TableState:
    name: str
    version: int | None
    """None: the table's log cannot be read at all (the reason is in `unreadable`)."""
    files: int
    rows: int
    bytes: int
    unreadable: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    other_files: int | None = None
    """Files in the table's folder that its current version does not use: older versions' (time
    travel, until vacuum) and strays (never read). None on an object store (not listed)."""


@dataclasses.dataclass
class Check:
    tables: list[TableState]
    strays: list[str]
    """Folders under tables/ that are not store tables (skipped by every reader)."""
    legacy: list[str]
    """Folders of the older hive layout left at the root (migrated or not)."""
    links: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(path under the root, what) of every symlink and mount found: never followed, never deleted in."""

    @property
    def ok(self) -> bool:
        return not any(t.unreadable for t in self.tables)


def check(store) -> Check:
    require_store(store)
    tables_root = delta.join(store.uri, delta.TABLES)
    folders = delta.list_dirs(tables_root, store.storage_options, store.local)
    names, states, strays = [], [], []
    for name in folders:
        shaped = delta.table_shaped(name)
        if shaped and delta.is_table(store.table_uri(name), store.storage_options):
            names.append(name)
        elif shaped and _lost_log(store, name):
            states.append(_broken(name, store.table_uri(name), _lost_log(store, name)))
        else:
            strays.append(readable(name))
    for name, why in store.misplaced():  # a table's folder replaced by a file
        states.append(_broken(name, store.table_uri(name), why))
    states += [_table_state(store, name) for name in names]
    states.sort(key=lambda t: t.name)
    return Check(
        tables=states,
        strays=strays,
        legacy=legacy_tables(store.root) if store.local else [],
        links=owned.links_and_mounts(str(store.root)) if store.local else [],
    )


def _broken(name: str, where: str, why: str) -> TableState:
    return TableState(name=name, version=None, files=0, rows=0, bytes=0, unreadable=[(where, why)])


def _lost_log(store, name: str) -> str | None:
    try:
        return store.lost_log(name)
    except InputError as exc:  # the jobs table, needed to judge, is itself broken: judged on its own
        return None if "jobs" != name else str(exc)


def require_store(store) -> None:
    """A local store root must be a folder holding tables (or the older layout), an object store's must
    answer (its bucket there, the credentials taken): else InputError."""
    if not store.local:
        store.place.require_reachable()
        return
    root = Path(store.root)
    if not root.exists():
        raise InputError(f"store {root}: no such directory")
    if not root.is_dir():
        raise InputError(f"store {root}: is a file, not a store directory")
    if not (root / delta.TABLES).is_dir() and not legacy_tables(root):
        raise InputError(f"store {root}: not a labprobe store (no {delta.TABLES}/ folder of Delta tables)")


def _table_state(store, name: str) -> TableState:
    """One table's state; a table whose log cannot be read is listed with the reason, never raised."""
    logs = commit_problems(store.root / delta.TABLES / name) if store.local else []
    try:
        table = store.table(name)
        actions = table.get_add_actions(flatten=True)
    except Exception as exc:  # delta-rs raises several kinds for a broken log: each is this table's problem
        why = str(exc).split(": ", 1)[-1] if isinstance(exc, InputError) else delta._short(exc, 160)
        broken = [(store.table_uri(name) + "/_delta_log", f"its log cannot be read: {why}")]
        return TableState(name=name, version=None, files=0, rows=0, bytes=0, unreadable=logs or broken)
    rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
    return TableState(
        name=name,
        version=table.version(),
        files=actions.num_rows,
        rows=sum(r or 0 for r in rows),
        bytes=sum(actions.column("size_bytes").to_pylist()),
        unreadable=logs + delta.unreadable_files(table) + delta.mismatched_files(table, deep=True),
        other_files=_other_files(store, name, table) if store.local else None,
    )


def _other_files(store, name: str, table) -> int:
    folder = store.root / delta.TABLES / name
    paths = table.get_add_actions(flatten=True).column("path").to_pylist()
    live = {str(folder / delta.os_path(unquote(p))) for p in paths}
    files = [p for p in folder.rglob("*") if p.is_file() and "_delta_log" not in p.relative_to(folder).parts]
    return sum(str(p) not in live for p in files)


def compact(store) -> dict[str, dict[str, int]]:
    """Compact every table and checkpoint its log; -> table -> {files_removed, files_added}.
    A table with nothing to compact is not touched (no commit, no checkpoint). A live file that is
    missing, unreadable or not what the log says is a CorruptStoreError naming it (one line), nothing
    committed. A table whose folder or log is a link or on another mount, or whose log holds anything but
    regular files, is left alone (warned): compaction's log cleanup deletes there (`_log_problem`)."""
    require_store(store)
    out = {}
    for name in store.table_names():
        why = table_problem(store, name) or _log_problem(store, name)
        if why:
            delta.log.warning(f"store {store.uri}: table {name} not compacted: {why}")
            continue
        table = store.table(name)
        delta.verify_files(table)  # a file replaced behind the log would be rewritten as if it were the table's
        try:
            metrics = table.optimize.compact(
                target_size=delta.TARGET_FILE_BYTES,
                writer_properties=delta.writer_properties(),
                post_commithook_properties=delta.HOOKS,  # the log is cleaned below, once, after the checks
            )
        except Exception as exc:  # delta-rs' reader raises more than OSError for a missing file
            raise delta._unreadable(table, exc) from None
        removed, added = int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0))
        if removed:
            table.create_checkpoint()
            _clean_log(store, name, table)
        out[name] = {"files_removed": removed, "files_added": added}
    return out


def _log_problem(store, name: str) -> str | None:
    """Why delta-rs may not clean table `name`'s log: it lists the log following links and deletes the
    expired commit files it finds there, in `cleanup_metadata` and inside `optimize.compact` itself (its
    commit hooks' cleanup_expired_logs=False notwithstanding, deltalake 1.6.6): a log holding anything
    but regular files (a folder linked to /elsewhere) is not the store's alone."""
    return owned.only_files(str(store.root), f"{delta.TABLES}/{name}/_delta_log") if store.local else None


def _clean_log(store, name: str, table) -> None:
    """Delete the log files past the log retention (7 days by default), never data; asked again after
    the compaction (`_log_problem`): a log that holds a link now is left as it is, with a warning."""
    why = _log_problem(store, name)
    if why:
        delta.log.warning(f"store {store.uri}: table {name}: log not cleaned: {why}")
        return
    table.cleanup_metadata()


def table_problem(store, name: str) -> str | None:
    """Why table `name`'s folder is not the store's to delete in: the folder or its _delta_log is a
    symlink or on another mount (its files live elsewhere). None on an object store (no links)."""
    if not store.local:
        return None
    return owned.folder_problem(str(store.root), f"{delta.TABLES}/{name}/_delta_log")


def retention_hours(retention_days: float, where: str = "--retention-days") -> int:
    """Whole hours of `retention_days`; InputError for a negative, infinite or NaN number of days."""
    if not (isinstance(retention_days, (int, float)) and math.isfinite(retention_days) and retention_days >= 0):
        raise InputError(f"{where}: expected a finite number of days >= 0, got {retention_days!r}")
    return round(retention_days * 24)


@dataclasses.dataclass
class Vacuumed:
    deleted: dict[str, list[str]]
    """Table -> the files deleted (or, dry run, that would be)."""
    refused: list[tuple[str, str]]
    """(file or table, why) of each candidate left alone: not the store's (a link, another mount)."""


def vacuum(store, retention_days: float = DEFAULT_RETENTION_DAYS, *, dry_run: bool = False) -> Vacuumed:
    """Delete (or, dry_run, list) per table the files no version of the last `retention_days` needs,
    leaving every file the newest version references, every file younger than VACUUM_MIN_AGE_S,
    and anything reached through a symlink or on another mount (owned.delete_file)."""
    hours = retention_hours(retention_days)
    require_store(store)
    out = Vacuumed(deleted={}, refused=[])
    for name in store.table_names():
        why = table_problem(store, name)
        if why:
            out.refused.append((store.table_uri(name), why))
            continue
        table = store.table(name)
        keep = f"interval {hours} hours"  # the log keeps as long: time travel needs both
        if not dry_run and table.metadata().configuration.get("delta.logRetentionDuration") != keep:
            table.alter.set_table_properties(
                {"delta.logRetentionDuration": keep}, post_commithook_properties=delta.HOOKS
            )
        try:
            listed = table.vacuum(retention_hours=hours, dry_run=True, enforce_retention_duration=False, full=True)
        except DeltaError as exc:  # a link loop under the folder: delta-rs' listing stops there
            out.refused.append((store.table_uri(name), f"its folder cannot be listed: {delta._short(exc, 200)}"))
            continue
        doomed = _still_unneeded(store, name, listed)
        out.deleted[name] = _delete(store, name, doomed, dry_run, out.refused)
    return out


def _still_unneeded(store, name: str, listed: list[str]) -> list[str]:
    """Of vacuum's candidates, those the table's newest version (read now) does not use and that are
    older than VACUUM_MIN_AGE_S."""
    newest = store.table(name)
    live = {_relative(u, newest.table_uri) for u in newest.file_uris()} if newest is not None else set()
    fs = _table_fs(store, name)
    now = time.time()
    doomed = []
    for path in listed:
        rel = _relative(path, store.table_uri(name))
        if rel in live:
            continue
        try:
            info = fs.get_file_info(rel)
        except (pa.ArrowException, OSError):  # a tombstone naming a URL (file:///elsewhere): no file here
            continue
        if (
            info.type == pa_fs.FileType.File
            and info.mtime is not None
            and now - info.mtime.timestamp() >= VACUUM_MIN_AGE_S
        ):
            doomed.append(path)
    return doomed


def _delete(store, name: str, doomed: list[str], dry_run: bool, refused: list[tuple[str, str]]) -> list[str]:
    """Delete `doomed` (a local store: each through owned.delete_file); -> those deleted."""
    deleted = []
    if store.local:
        for path in doomed:
            rel = delta.os_path(_relative(path, store.table_uri(name)))  # delta-rs' characters, as os calls take them
            why = owned.delete_file(str(store.root), f"{delta.TABLES}/{name}/{rel}", dry_run=dry_run)
            if why:
                refused.append((path, why))
            else:
                deleted.append(path)
        return deleted
    fs = _table_fs(store, name)
    for path in doomed:
        try:
            if not dry_run:
                fs.delete_file(_relative(path, store.table_uri(name)))
        except FileNotFoundError:
            pass  # another vacuum took it
        deleted.append(path)
    return deleted


def _table_fs(store, name: str) -> pa_fs.FileSystem:
    if store.local:
        return pa_fs.SubTreeFileSystem(delta._unicode(str(store.root / delta.TABLES / name)), pa_fs.LocalFileSystem())
    from deltalake.fs import DeltaStorageHandler

    return pa_fs.PyFileSystem(DeltaStorageHandler(store.table_uri(name), store.storage_options or None))


def _relative(path: str, table_uri: str) -> str:
    """A file's path inside its table's folder, from a URI, an absolute path or a relative path."""
    text = path.removeprefix("file://")
    base = table_uri.removeprefix("file://").rstrip("/") + "/"
    return unquote(text[len(base) :] if text.startswith(base) else text.lstrip("/") if "://" not in text else text)
