"""`labprobe store migrate`: the older hive layout (a Parquet file per job per table) into Delta tables.

    <root>/<table>/host=<host>/checkpoint=<checkpoint>/<job_id>-<run_id>.parquet   (read, left in place)
        ->  <root>/tables/<table>/                                                  (Delta, written)

Every store file is carried over with its `host` and `checkpoint` (the old layout kept them in the
folder names), the probe tables first and the jobs table last, one commit each, so the migrated
jobs commit their rows as a sweep's would; rows of a job that never got its job row come along too
(nothing is lost) and stay unread, as before. A file that is not a store file (not Parquet, empty,
unreadable, or Parquet of another schema: no job_id/run_id, or null ones) is skipped and named.
Run again, it adds only what is not yet in the Delta tables. The old files stay until the user
removes them; artifacts/ keeps its layout and needs no migration. The files are read through the
root's file system (runner.store.root): a local folder, or an object store whose bucket holds them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq

from runner.store import delta
from runner.store.root import StoreRoot

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


def legacy_tables(root: StoreRoot | Path | str) -> list[str]:
    """Folders of `root` in the older layout: `jobs` or `<probe>.<table>`, holding `host=` folders."""
    place = StoreRoot.of(root)
    if place.local and not place.path.is_dir():
        return []
    return sorted(
        name
        for name in _folders(place, "")
        if (name == "jobs" or "." in name)
        and not name.startswith(".")
        and any(c.startswith("host=") for c in _folders(place, name))
    )


def _folders(place: StoreRoot, rel: str) -> list[str]:
    infos = place.filesystem().get_file_info(pa_fs.FileSelector(rel, allow_not_found=True))
    return [i.base_name for i in infos if i.type == pa_fs.FileType.Directory]


def migrate(store) -> Migration:
    """Carry every legacy table of `store` (a runner.store.store.Store) into its Delta tables."""
    report = Migration()
    names = legacy_tables(store.place)
    for name in sorted(names, key=lambda n: n == "jobs"):  # jobs last: job rows commit the rest
        tables = []
        for path in _files(store.place, name, report):
            table = _read(store.place, path, name, report)
            if table is not None:
                tables.append(table)
        report.files[name] = len(tables)
        data = pa.concat_tables(tables, promote_options="permissive") if tables else None
        report.rows[name] = _add_new(store, name, data) if data is not None else 0
    return report


def _files(place: StoreRoot, name: str, report: Migration) -> list[pa_fs.FileInfo]:
    """The files of legacy table `name` in host=/checkpoint= folders (the others named in the report)."""
    infos = place.filesystem().get_file_info(pa_fs.FileSelector(name, recursive=True))
    out = []
    for info in sorted(infos, key=lambda i: i.path):
        if info.type != pa_fs.FileType.File or info.base_name.startswith("."):  # dot files: the old writer's temp files
            continue
        rel = info.path.split("/")[1:]
        if len(rel) != 3 or not rel[0].startswith("host=") or not rel[1].startswith("checkpoint="):
            report.skipped.append((place.join(info.path), "not in a host=/checkpoint= folder"))
        elif not info.base_name.endswith(".parquet"):
            report.skipped.append((place.join(info.path), "not a Parquet file"))
        else:
            out.append(info)
    return out


def _read(place: StoreRoot, info: pa_fs.FileInfo, name: str, report: Migration) -> pa.Table | None:
    """The file's rows with host and checkpoint from its folders; None (and why) if not a store file."""
    shown = place.join(info.path)
    try:
        with place.filesystem().open_input_file(info.path) as handle:
            table = pq.ParquetFile(handle, pre_buffer=False).read()
    except (OSError, pa.ArrowException):
        why = "empty)" if info.size == 0 else "corrupt or not Parquet)"
        report.skipped.append((shown, "unreadable as Parquet (" + why))
        return None
    needed = NEEDED.get(name, NEEDED_ROWS)
    missing = [c for c in needed if c not in table.column_names]
    if missing or any(table.column(c).null_count for c in ("job_id", "run_id") if c in table.column_names):
        why = f"no {missing[0]} column" if missing else "null job_id or run_id"
        report.skipped.append((shown, f"foreign schema ({why}): not a store file"))
        return None
    _, host_dir, checkpoint_dir, _ = info.path.split("/")
    host = host_dir.removeprefix("host=")
    checkpoint = checkpoint_dir.removeprefix("checkpoint=")
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
