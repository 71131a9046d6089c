"""Keeping the store fast and honest: check, compact (+ log checkpoint), vacuum.

- compact: per table, small files are rewritten into fewer (new files; one commit swaps them for
  the old, which stay on disk for time travel), then a log checkpoint is written, so opening a table
  reads one Parquet checkpoint instead of replaying every commit. Run after every sweep.
- vacuum: delete files no table version younger than the retention needs (the lab's
  `store.vacuum_retention_days`, default 7: a week of time travel). Also removes stray files that
  are older than the retention: delta-rs deletes what its log does not know.
- check: per table its version, live files, rows, bytes, and every live file whose footer cannot
  be read; folders under tables/ that are not tables; a leftover older-layout tree.
"""

from __future__ import annotations

import dataclasses

from runner.store import delta
from runner.store.migrate import legacy_tables

DEFAULT_RETENTION_DAYS = 7.0


@dataclasses.dataclass
class TableState:
    name: str
    version: int
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

    @property
    def ok(self) -> bool:
        return not any(t.unreadable for t in self.tables)


def check(store) -> Check:
    tables_root = delta.join(store.uri, delta.TABLES)
    names = store.table_names()
    strays = [n for n in delta.list_dirs(tables_root, store.storage_options, store.local) if n not in names]
    states = []
    for name in names:
        table = store.table(name)
        actions = table.get_add_actions(flatten=True)
        rows = actions.column("num_records").to_pylist() if "num_records" in actions.column_names else []
        states.append(
            TableState(
                name=name,
                version=table.version(),
                files=actions.num_rows,
                rows=sum(r or 0 for r in rows),
                bytes=sum(actions.column("size_bytes").to_pylist()),
                unreadable=delta.unreadable_files(table),
                other_files=_other_files(store, name, table) if store.local else None,
            )
        )
    return Check(tables=states, strays=strays, legacy=legacy_tables(store.root) if store.local else [])


def _other_files(store, name: str, table) -> int:
    folder = store.root / delta.TABLES / name
    live = {str(folder / p) for p in table.get_add_actions(flatten=True).column("path").to_pylist()}
    files = [p for p in folder.rglob("*") if p.is_file() and "_delta_log" not in p.relative_to(folder).parts]
    return sum(str(p) not in live for p in files)


def compact(store) -> dict[str, dict[str, int]]:
    """Compact every table and checkpoint its log; -> table -> {files_removed, files_added}.
    A table with nothing to compact is not touched (no commit, no checkpoint)."""
    out = {}
    for name in store.table_names():
        table = store.table(name)
        metrics = table.optimize.compact(
            target_size=delta.TARGET_FILE_BYTES, writer_properties=delta.writer_properties()
        )
        removed, added = int(metrics.get("numFilesRemoved", 0)), int(metrics.get("numFilesAdded", 0))
        if removed:
            table.create_checkpoint()
            table.cleanup_metadata()  # log files past the log retention (7 days by default), never data
        out[name] = {"files_removed": removed, "files_added": added}
    return out


def vacuum(store, retention_days: float = DEFAULT_RETENTION_DAYS, *, dry_run: bool = False) -> dict[str, list[str]]:
    """Delete (or, dry_run, list) per table the files no version of the last `retention_days` needs."""
    hours = max(0, round(retention_days * 24))
    out = {}
    for name in store.table_names():
        table = store.table(name)
        keep = f"interval {hours} hours"  # the log keeps as long: time travel needs both
        if not dry_run and table.metadata().configuration.get("delta.logRetentionDuration") != keep:
            table.alter.set_table_properties({"delta.logRetentionDuration": keep})
        out[name] = table.vacuum(retention_hours=hours, dry_run=dry_run, enforce_retention_duration=False, full=True)
    return out
