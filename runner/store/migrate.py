"""`labprobe store migrate`: the older hive layout (a Parquet file per job per table) into Delta tables.

    <root>/<table>/host=<host>/checkpoint=<checkpoint>/<job_id>-<run_id>.parquet   (read, left in place)
        ->  <root>/tables/<table>/                                                  (Delta, written)

Every store file is carried over with its `host` and `checkpoint` (the old layout kept them in the
folder names), the probe tables first and the jobs table last, one commit each, so the migrated
jobs commit their rows as a sweep's would; rows of a job that never got its job row come along too
(nothing is lost) and stay unread, as before. A file that is not a store file (not Parquet, empty,
unreadable, or Parquet of another schema: no job_id/run_id, or null ones) is skipped and named.
Run again, it adds only what is not yet in the Delta tables. The old files stay until the user
removes them; artifacts/ keeps its layout and needs no migration.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from runner.store import delta

NEEDED = {"jobs": ("job_id", "run_id", "probe", "status", "finished_at")}
"""Columns a file must carry to be taken in as rows of its table."""
NEEDED_ROWS = ("job_id", "run_id", "probe", "finished_at")


@dataclasses.dataclass
class Migration:
    rows: dict[str, int] = dataclasses.field(default_factory=dict)
    """Table -> rows added by this migration."""
    files: dict[str, int] = dataclasses.field(default_factory=dict)
    """Table -> store files read."""
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(file, why) of every file that is not a store file."""


def legacy_tables(root: Path) -> list[str]:
    """Folders of `root` in the older layout: `jobs` or `<probe>.<table>`, holding `host=` folders."""
    if not root.is_dir():
        return []
    return sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir()
        and (p.name == "jobs" or "." in p.name)
        and not p.name.startswith(".")
        and any(c.is_dir() and c.name.startswith("host=") for c in p.iterdir())
    )


def migrate(store) -> Migration:
    """Carry every legacy table of `store` (a local runner.store.store.Store) into its Delta tables."""
    report = Migration()
    names = legacy_tables(store.root)
    for name in sorted(names, key=lambda n: n == "jobs"):  # jobs last: job rows commit the rest
        tables = []
        for path in _files(store.root / name, report):
            table = _read(path, name, report)
            if table is not None:
                tables.append(table)
        report.files[name] = len(tables)
        data = pa.concat_tables(tables, promote_options="permissive") if tables else None
        report.rows[name] = _add_new(store, name, data) if data is not None else 0
    return report


def _files(folder: Path, report: Migration) -> list[Path]:
    out = []
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name.startswith("."):  # dot files: the old writer's temp files
            continue
        rel = path.relative_to(folder).parts
        if len(rel) != 3 or not rel[0].startswith("host=") or not rel[1].startswith("checkpoint="):
            report.skipped.append((str(path), "not in a host=/checkpoint= folder"))
        elif path.suffix != ".parquet":
            report.skipped.append((str(path), "not a Parquet file"))
        else:
            out.append(path)
    return out


def _read(path: Path, name: str, report: Migration) -> pa.Table | None:
    """The file's rows with host and checkpoint from its folders; None (and why) if not a store file."""
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException):
        report.skipped.append(
            (
                str(path),
                "unreadable as Parquet (" + ("empty)" if path.stat().st_size == 0 else "corrupt or not Parquet)"),
            )
        )
        return None
    needed = NEEDED.get(name, NEEDED_ROWS)
    missing = [c for c in needed if c not in table.column_names]
    if missing or any(table.column(c).null_count for c in ("job_id", "run_id") if c in table.column_names):
        why = f"no {missing[0]} column" if missing else "null job_id or run_id"
        report.skipped.append((str(path), f"foreign schema ({why}): not a store file"))
        return None
    host = path.parent.parent.name.removeprefix("host=")
    checkpoint = path.parent.name.removeprefix("checkpoint=")
    for column, value in (("host", host), ("checkpoint", checkpoint)):
        if column in table.column_names:
            table = table.drop_columns([column])
        table = table.append_column(column, pa.array([value] * table.num_rows, pa.string()))
    return table


def _add_new(store, name: str, data: pa.Table) -> int:
    """Append the rows whose (job_id, run_id) the Delta table does not hold yet; -> rows added."""
    uri = store.table_uri(name)
    existing = delta.open_table(uri, store.storage_options)
    if existing is not None:
        have = delta.read(existing, columns=["job_id", "run_id"])
        have_keys = pc.binary_join_element_wise(have.column("job_id"), have.column("run_id"), "\x00")
        keys = pc.binary_join_element_wise(data.column("job_id"), data.column("run_id"), "\x00")
        data = data.filter(pc.invert(pc.is_in(keys, value_set=have_keys)))
    if data.num_rows:
        delta.append(existing or uri, data, store.storage_options)
    return data.num_rows
