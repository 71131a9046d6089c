"""`labprobe store export DIR`: every table's current rows as one plain Parquet file per table.

A Delta table's folder holds more Parquet files than its current version uses: compaction writes
new files and leaves the replaced ones for time travel until vacuum, so a reader that globs the
folder (DuckDB's `read_parquet`, pandas, `pyarrow.dataset`) counts rows twice or more. The export
is for those readers: `DIR/<table>.parquet` (`jobs.parquet`, `padding.strategies.parquet`, ...)
holds exactly the rows labprobe reads: the table's current version, less the rows of a job whose
job row was never committed (a writer killed between its tables and its job row). `host`,
`checkpoint` and the other key columns are kept as columns.

DIR is the export's own: a new or empty folder, or an earlier export (it holds MANIFEST). Each file
is written beside its final name and renamed into place; files of an earlier export that this one
does not write are removed, so DIR never holds stale rows.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.result import InputError, loads
from runner.store import delta, owned

MANIFEST = "labprobe-export.json"
"""Written last, naming the store, the tables and their versions: what marks DIR as an export."""
_IDS = ("job_id", "run_id")


@dataclasses.dataclass
class Exported:
    name: str
    version: int
    rows: int
    path: Path


def export(store, folder: Path) -> list[Exported]:
    """Write every table of `store` into `folder` (see the module docstring); -> what was written."""
    folder = Path(folder)
    previous = _previous_files(folder)
    names = store.table_names()  # first: a store a reader must refuse (a lost log) leaves no folder behind
    for name in names:  # and a file that is not what its log recorded: refused before anything is written
        delta.verify_files(store.table(name))
    folder.mkdir(parents=True, exist_ok=True)
    # Named first, so a folder left by an export that stopped half-way is still known as an export.
    _write_manifest(folder, store, {n: None for n in [*(p.removesuffix(".parquet") for p in previous), *names]})
    out = []
    if "jobs" in names:  # first: a table's rows are kept where the jobs read here have their job row
        jobs_table = store.table("jobs")
        jobs = delta.read(jobs_table)
        done = _pairs(jobs)
        out.append(_write(folder, "jobs", jobs_table.version(), jobs))
        for name in names:
            if name != "jobs":
                table = store.table(name)
                rows = delta.read(table)
                out.append(_write(folder, name, table.version(), rows.filter(pc.is_in(_pairs(rows), done))))
    for stale in previous - {e.path.name for e in out}:
        owned.delete_file(str(folder), stale)  # never through a link, never outside the folder
    _write_manifest(folder, store, {e.name: {"version": e.version, "rows": e.rows} for e in out})
    return out


def _write_manifest(folder: Path, store, tables: dict) -> None:
    text = json.dumps({"store": store.uri, "tables": tables}, indent=1) + "\n"
    _replace(folder / MANIFEST, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _previous_files(folder: Path) -> set[str]:
    """The files an earlier export wrote into `folder`; refuse a folder that is not an export."""
    if not folder.exists():
        return set()
    if not folder.is_dir():
        raise InputError(f"export: {folder} is a file, not a folder")
    manifest = folder / MANIFEST
    if not manifest.is_file():
        if any(folder.iterdir()):
            raise InputError(
                f"export: {folder} is not empty and holds no earlier export ({MANIFEST}): "
                "give a new or empty folder (the export replaces what it holds)"
            )
        return set()
    try:
        tables = loads(manifest.read_text(encoding="utf-8"))["tables"]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"export: {manifest} cannot be read ({exc}): remove the folder or give another") from None
    # Only plain names are this export's files: a manifest naming ../x or a/b names nothing to remove.
    return {
        f"{name}.parquet" for name in tables if isinstance(name, str) and "/" not in name and name[:1] not in ("", ".")
    }


def _pairs(rows: pa.Table) -> pa.Array:
    """One string per row naming its (job_id, run_id)."""
    return pc.binary_join_element_wise(*(rows.column(c).cast(pa.string()) for c in _IDS), "\x1f").combine_chunks()


def _write(folder: Path, name: str, version: int, rows: pa.Table) -> Exported:
    path = folder / f"{name}.parquet"
    _replace(path, lambda tmp: _write_parquet(rows, tmp))
    return Exported(name=name, version=version, rows=rows.num_rows, path=path)


def _write_parquet(rows: pa.Table, tmp: Path) -> None:
    # Through an open file, not the path: pyarrow turns a path into a UTF-8 URI, and a folder whose
    # name is not UTF-8 (bytes kept as surrogates) would raise UnicodeEncodeError there.
    with open(tmp, "wb") as sink:
        pq.write_table(rows, sink)


def _replace(path: Path, write) -> None:
    """`write(tmp)` then rename over `path`: a reader sees the old file or the new, never half of one."""
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
