"""The store's Delta Lake tables through delta-rs (`deltalake`): where they live, append, read.

A store root (runner.store.root) is a local directory or an object-store URL delta-rs supports
(`s3://`, `gs://`, `az://`, `abfss://`, ...). Its tables live under `<root>/tables/<name>/` (`jobs`, and
`<probe>.<table>` per probe table), each a Delta table: data files plus the `_delta_log/` that says
which files are the table. A file not in the log (a stray, a writer's half-written file, a file of
the older hive layout) is never read: that is how stray files stop breaking reads.

Errors: a write the table refuses (a column whose type cannot merge) is `StoreError`; a file the
log references but that cannot be read (corrupt, missing) is `CorruptStoreError`, an InputError
naming the file, so every command reports it in one line and exits 2.
"""

from __future__ import annotations

import errno
import logging
import os
import random
import re
import stat
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pa_fs
import pyarrow.parquet as pq
from deltalake import (
    BloomFilterProperties,
    ColumnProperties,
    DeltaTable,
    QueryBuilder,
    WriterProperties,
    write_deltalake,
)
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError
from deltalake.fs import DeltaStorageHandler
from deltalake.transaction import PostCommitHookProperties
from pyarrow.dataset import ParquetReadOptions

from probes.result import InputError
from runner.store.root import one_line

log = logging.getLogger("labprobe.store")

TABLES = "tables"
"""Folder of the root that holds the Delta tables (the older hive layout used the root itself)."""
_TABLE_NAME = re.compile(r"jobs|[A-Za-z0-9][A-Za-z0-9_-]*\.[A-Za-z0-9._-]+")
TARGET_FILE_BYTES = 32 * 2**20
"""Compaction target: files above it are left alone, so a nightly compaction rewrites only the
recent small files, not the whole table (a year of one table stays a few files)."""


ROW_GROUP_ROWS = 16_384
"""Rows per Parquet row group of compacted files: small enough that a read of the newest runs
skips the older row groups by their run_id statistics (runner.store.store's `_only`)."""
BLOOM_FPP = 0.01


def writer_properties() -> WriterProperties:
    """Every data file (appends and compaction): row groups of ROW_GROUP_ROWS, and a bloom filter on
    `job_id` per row group, so a read of a few given jobs (a sweep's plan) skips the row groups that
    hold none of them. Job ids are hashes, so min/max statistics cannot skip anything; a bloom filter
    sized for a full row group of distinct ids at 1% false positives is ~32 KiB per row group (a
    one-row file's filter is a few dozen bytes: the writer folds it to the values written)."""
    bloom = BloomFilterProperties(set_bloom_filter_enabled=True, fpp=BLOOM_FPP, ndv=ROW_GROUP_ROWS)
    return WriterProperties(
        max_row_group_size=ROW_GROUP_ROWS, column_properties={"job_id": ColumnProperties(bloom_filter_properties=bloom)}
    )


RETENTION = "interval 7 days"
TABLE_CONFIG = {"delta.logRetentionDuration": RETENTION, "delta.deletedFileRetentionDuration": RETENTION}
"""A new table keeps 7 days of log (time travel), as vacuum keeps 7 days of files by default. Every
commit lists the log folder, so a log kept 30 days (Delta's default) of 200 commits a night would
make each commit several times slower."""


COMMIT_ATTEMPTS = 8
"""Tries of one append whose commit another writer's metadata change failed (see `append`)."""

HOOKS = PostCommitHookProperties(create_checkpoint=True, cleanup_expired_logs=False)
"""Per commit: a log checkpoint every 100 commits, but no expired-log cleanup, which lists the whole
log each time (compaction cleans the log once per sweep: runner.store.maintain)."""


class StoreError(RuntimeError):
    """A write the store refuses: a rewrite of a stored job, or rows the table cannot take."""


class CorruptStoreError(InputError):
    """A file the table's log references cannot be read (corrupt or missing)."""


def _unicode(path: str) -> str:
    """`path` as delta-rs needs it: under an ASCII locale (LC_ALL=C, PYTHONUTF8=0) Python holds a
    non-ASCII path's bytes as surrogates (what its own file calls need), which delta-rs cannot
    encode; it gets the real characters (the bytes are UTF-8)."""
    try:
        return os.fsencode(path).decode("utf-8")
    except UnicodeDecodeError:
        return path


def open_regular(path: str | Path):
    """`path` opened to read, binary, when it is a regular file; OSError otherwise. The open never
    blocks (a FIFO in place of a data file hung `store check` and `store repair` for ever), and the
    kind is checked on what was opened."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


def os_path(text: str) -> str:
    """A local path as delta-rs gives it (real characters) as Python's own file calls take it: the
    inverse of `_unicode`. Under an ASCII locale `os.stat('/tmp/störe/...')` raises UnicodeEncodeError;
    the same bytes carried as surrogates are what the filesystem holds. Unchanged under UTF-8."""
    return os.fsdecode(text.encode("utf-8", "surrogateescape"))


def join(uri: str, *parts: str) -> str:
    return "/".join([uri.rstrip("/"), *parts])


def open_table(uri: str, options: dict[str, str] | None) -> DeltaTable | None:
    """The table at `uri`, or None when there is none yet."""
    try:
        return DeltaTable(_unicode(uri), storage_options=options or None)
    except TableNotFoundError:
        return None
    except (DeltaError, OSError) as exc:
        raise CorruptStoreError(f"table {uri}: its log cannot be read: {_short(exc)}") from None


def append(target: DeltaTable | str, data: pa.Table, options: dict[str, str] | None) -> DeltaTable | None:
    """One commit adding `data` (to a table, or creating it at a uri); a new column merges into the
    table's schema (older rows read null). -> the table it committed to (None: not known).

    Another writer's commit in between (another host, or process, appending to the same table) is
    resolved by delta-rs for plain appends; one that changed the table's metadata (it created the
    table, or merged a new column) fails ours (CommitFailedError): then the table is read again, the
    rows fitted to its schema now, and the commit tried again, up to COMMIT_ATTEMPTS times. The data
    file of a failed try is never in the log, so never read (vacuum deletes it)."""
    uri = target.table_uri if isinstance(target, DeltaTable) else _unicode(target)
    table = target if isinstance(target, DeltaTable) else open_table(target, options)
    for attempt in range(COMMIT_ATTEMPTS):
        try:
            _append_once(table, uri, data, options)
            return table
        except CommitFailedError as exc:
            if attempt == COMMIT_ATTEMPTS - 1:
                raise StoreError(f"table {uri}: rows refused: {_short(exc)}") from None
            time.sleep(random.uniform(0.05, 0.2) * (attempt + 1))  # apart from the other writer's next try
            table = open_table(uri, options)
    return table


def _append_once(table: DeltaTable | None, uri: str, data: pa.Table, options: dict[str, str] | None) -> None:
    if table is not None:
        data = fit(data, pa.schema(table.schema().to_arrow()), uri)
    config = None if table is not None else TABLE_CONFIG
    try:
        write_deltalake(
            table or uri,
            data,
            mode="append",
            schema_mode="merge",
            storage_options=options or None,
            configuration=config,
            post_commithook_properties=HOOKS,
            writer_properties=writer_properties(),
        )
    except CommitFailedError:
        raise
    except Exception as exc:
        raise StoreError(f"table {uri}: rows refused: {_short(exc)}") from None


def overwrite(table: DeltaTable, data: pa.Table) -> None:
    """One commit making `data` the table's whole content (a new version; the old files stay on disk
    for time travel until vacuum): store repair's, nothing else's."""
    data = fit(data, pa.schema(table.schema().to_arrow()), table.table_uri)
    try:
        write_deltalake(
            table,
            data,
            mode="overwrite",
            schema_mode="merge",
            post_commithook_properties=HOOKS,
            writer_properties=writer_properties(),
        )
    except Exception as exc:
        raise StoreError(f"table {table.table_uri}: rows refused: {_short(exc)}") from None


def fit(data: pa.Table, schema: pa.Schema, uri: str) -> pa.Table:
    """`data` with each column the table already has cast to the table's type, refusing a lossy
    cast (delta-rs would silently store 2.5 as 2 in an integer column)."""
    for i, field in enumerate(data.schema):
        if field.name not in schema.names:
            continue
        want = schema.field(field.name).type
        if field.type != want and not pa.types.is_null(want):  # a null column takes any type: merge
            try:
                data = data.set_column(i, field.with_type(want), pc.cast(data.column(i), want, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise StoreError(
                    f"table {uri}: column {field.name!r} holds {field.type} values the table's "
                    f"{want} cannot take without loss ({_short(exc, 120)})"
                ) from None
    return data


def read(
    table: DeltaTable, *, columns: list[str] | None = None, filters: Any = None, dictionary: set[str] | None = None
) -> pa.Table:
    """The table's rows (one snapshot: the version the DeltaTable was loaded at). `dictionary`:
    string columns read as dictionary arrays (no string per row: a year of keys twice as fast).
    A local table whose files are not the ones its log recorded is refused (verify_files).
    A local table is read through Arrow's own file system (`reader_filesystem`: no Python buffers
    left to Arrow's I/O threads at exit, which could abort the process)."""
    verify_files(table)
    options = ParquetReadOptions(dictionary_columns=dictionary) if dictionary else None
    try:
        dataset = table.to_pyarrow_dataset(parquet_read_options=options, filesystem=reader_filesystem(table))
        rows = dataset.to_table(columns=columns, filter=filters)
        return rows.unify_dictionaries() if dictionary else rows
    except Exception as exc:  # delta-rs' file system raises more than OSError: find the file, name it
        raise _unreadable(table, exc) from exc


def read_ids(table: DeltaTable, columns: list[str], job_ids: list[str]) -> pa.Table:
    """`columns` of the rows whose job_id is one of `job_ids`, read through DataFusion, which skips
    every row group whose job_id bloom filter rules all of them out (pyarrow's reader uses min/max
    statistics only, useless on hashed ids). String columns come back as plain strings."""
    verify_files(table)
    try:
        rows = pa.table(QueryBuilder().register("t", table).execute(ids_query(columns, job_ids)).read_all())
    except Exception as exc:
        raise _unreadable(table, exc) from exc
    for i, field in enumerate(rows.schema):
        if pa.types.is_string_view(field.type) or pa.types.is_large_string(field.type):
            rows = rows.set_column(i, field.with_type(pa.string()), pc.cast(rows.column(i), pa.string()))
    return rows


def ids_query(columns: list[str], job_ids: list[str]) -> str:
    """read_ids' SQL over table `t`."""
    quoted = ", ".join("'" + i.replace("'", "''") + "'" for i in job_ids)
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in columns)
    return f'SELECT {names} FROM t WHERE "job_id" IN ({quoted})'


def _unreadable(table: DeltaTable, exc: Exception) -> CorruptStoreError:
    """The error for a read that failed: naming the first live file that cannot be read."""
    bad = unreadable_files(table)
    if not bad:
        return CorruptStoreError(f"table {table.table_uri} cannot be read: {_short(exc)}")
    more = f" (and {len(bad) - 1} more: labprobe store check lists them)" if len(bad) > 1 else ""
    return CorruptStoreError(
        f"table {table.table_uri}: file {bad[0][0]} is referenced by the log but cannot be read ({bad[0][1]}){more}"
    )


def unreadable_files(table: DeltaTable) -> list[tuple[str, str]]:
    """(file, why) for every live file that cannot be read whole (missing, truncated, corrupt).

    Read without pre-buffering, and on a local table through Arrow's own file system: a pre-buffered
    read through delta-rs' Python file handler leaves Arrow I/O threads holding Python buffers after
    the read returns; one still releasing its buffer while the interpreter exits aborts the process
    ("terminate called without an active exception", exit 134, about 1 run in 15 of `store check`)."""
    fs = reader_filesystem(table)
    plain = isinstance(fs, pa_fs.SubTreeFileSystem)  # the log's paths are URL-encoded; a folder's are not
    folder = local_folder(table) if plain else None
    bad = []
    for path in table.get_add_actions(flatten=True).column("path").to_pylist():
        try:
            if folder is not None:  # Arrow's open of a FIFO waits for a writer for ever: never opened
                with open_regular(os_path(os.path.join(folder, unquote(path)))):
                    pass
            with fs.open_input_file(unquote(path) if plain else path) as handle:
                pq.ParquetFile(handle, pre_buffer=False).read()
        except Exception as exc:
            bad.append((join(table.table_uri, path), _short(exc, 160)))
    return bad


def live_files(table: DeltaTable) -> pa.Table:
    """The newest version's add actions, flattened: path, size_bytes, num_records, null_count.*, min.*, max.*."""
    return pa.table(table.get_add_actions(flatten=True))


def local_folder(table: DeltaTable) -> str | None:
    """The table's folder when it is a local directory, else None."""
    uri = table.table_uri
    local = uri[len("file://") :] if uri.startswith("file://") else uri if uri.startswith("/") else None
    return None if local is None else unquote(local)


def verify_files(table: DeltaTable) -> None:
    """Refuse (CorruptStoreError naming the file) a local table whose live files are not the ones its
    log recorded: a file's size differs from the log's (a file replaced behind the log's back reads
    other rows, or halves of them). One stat per live file; an object store is not checked here."""
    bad = mismatched_files(table)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise CorruptStoreError(
            f"table {table.table_uri}: file {bad[0][0]} is not the file its log recorded ({bad[0][1]}){more}: "
            "labprobe store check lists them, labprobe store repair puts the table right"
        )


def mismatched_files(table: DeltaTable, *, deep: bool = False) -> list[tuple[str, str]]:
    """(file, why) for every live file of a local table whose size differs from the log's; `deep`:
    also its row count, null counts and value ranges where the log records them (the file is read
    whole). A missing or unreadable file is unreadable_files' to report, not this."""
    folder = local_folder(table)
    if folder is None:
        return []
    actions = live_files(table)
    bad = []
    for i, path in enumerate(actions.column("path").to_pylist()):
        full = os_path(os.path.join(folder, unquote(path)))
        try:
            size = os.stat(full).st_size
        except OSError:
            continue
        said = actions.column("size_bytes")[i].as_py()
        if said is not None and size != said:
            bad.append((join(table.table_uri, path), f"{size} bytes where the log says {said}"))
        elif deep:
            why = _content_mismatch(full, actions.slice(i, 1))
            if why:
                bad.append((join(table.table_uri, path), why))
    return bad


def _content_mismatch(path: str, action: pa.Table) -> str | None:
    """How a file's rows differ from its add action's statistics (rows, null counts, min/max), or None."""
    try:
        with open_regular(path) as handle:
            rows = pq.ParquetFile(handle, pre_buffer=False).read()
    except Exception:
        return None  # unreadable: unreadable_files says so
    said = action.column("num_records")[0].as_py() if "num_records" in action.column_names else None
    if said is not None and rows.num_rows != said:
        return f"{rows.num_rows} rows where the log says {said}"
    for name in rows.column_names:
        column = rows.column(name)
        nulls = action.column(f"null_count.{name}")[0].as_py() if f"null_count.{name}" in action.column_names else None
        if nulls is not None and column.null_count != nulls:
            return f"column {name!r} holds {column.null_count} nulls where the log says {nulls}"
        why = _outside_range(name, column, action)
        if why:
            return why
    return None


def _outside_range(name: str, column: pa.ChunkedArray, action: pa.Table) -> str | None:
    """Values of `column` below the log's min or above its max (a string's recorded bounds may be
    shortened prefixes: still bounds)."""
    if column.null_count == len(column) or f"min.{name}" not in action.column_names:
        return None
    try:
        low, high = action.column(f"min.{name}")[0], action.column(f"max.{name}")[0]
        if pa.types.is_timestamp(column.type):  # Delta keeps timestamp statistics in milliseconds
            column = column.cast(pa.timestamp("ms", column.type.tz), safe=False)
        span = pc.min_max(column)
        if low.is_valid and pc.less(span["min"], low.cast(column.type)).as_py():
            return f"column {name!r} holds {span['min']} below the log's min {low}"
        if high.is_valid and pc.greater(span["max"], high.cast(column.type)).as_py():
            return f"column {name!r} holds {span['max']} above the log's max {high}"
    except (pa.ArrowException, KeyError, TypeError):
        return None  # a type the statistics do not compare simply: rows and nulls still checked
    return None


def reader_filesystem(table: DeltaTable) -> pa_fs.FileSystem:
    """Arrow's local file system rooted at the table where it is a folder here, else delta-rs' handler."""
    uri = table.table_uri
    local = uri[len("file://") :] if uri.startswith("file://") else uri if uri.startswith("/") else None
    if local is not None:
        return pa_fs.SubTreeFileSystem(unquote(local), pa_fs.LocalFileSystem())
    return table_filesystem(table)


def table_filesystem(table: DeltaTable) -> pa_fs.FileSystem:
    return pa_fs.PyFileSystem(
        DeltaStorageHandler.from_table(table._table, table._storage_options, table._table.get_add_file_sizes())
    )


def data_files(folder: Path) -> list[Path]:
    """The data files directly in a local table folder (not its log's, not a writer's dot-named
    temp files): what a Delta table of this store holds."""
    try:
        entries = sorted(folder.iterdir())
    except OSError:
        return []
    return [p for p in entries if p.suffix == ".parquet" and not p.name.startswith((".", "_")) and p.is_file()]


def data_pairs(files: list[Path]) -> set[tuple[str, str]]:
    """The (job_id, run_id) of every row of these Parquet files (unreadable or foreign ones skipped)."""
    pairs: set[tuple[str, str]] = set()
    for path in files:
        try:
            with open_regular(path) as handle:
                rows = pq.ParquetFile(handle, pre_buffer=False).read(columns=["job_id", "run_id"])
        except Exception:  # not Parquet, cut short, another schema: not rows of this store
            continue
        pairs.update(zip(rows.column("job_id").to_pylist(), rows.column("run_id").to_pylist()))
    return pairs


def list_dirs(uri: str, options: dict[str, str] | None, local: bool) -> list[str]:
    """Names of the folders directly under `uri` (empty when it does not exist)."""
    if local:
        path = Path(uri)
        return sorted(p.name for p in path.iterdir() if p.is_dir()) if path.is_dir() else []
    fs = pa_fs.PyFileSystem(DeltaStorageHandler(_unicode(uri), options or None))
    infos = fs.get_file_info(pa_fs.FileSelector("", allow_not_found=True))
    return sorted(i.base_name for i in infos if i.type == pa_fs.FileType.Directory)


def table_shaped(name: str) -> bool:
    """Whether a folder name under tables/ is one a table of this store has: `jobs` or
    `<probe>.<table>`, plain ASCII (a name holding bytes that are not UTF-8 is a stray, never handed to
    delta-rs, which cannot encode it)."""
    return _TABLE_NAME.fullmatch(name) is not None


def not_folders(uri: str, local: bool) -> list[tuple[str, str]]:
    """(name, what it is) of every table-shaped entry directly under a local `uri` that is not a
    folder: a table whose folder was replaced by a file, whose rows no reader can see."""
    path = Path(uri)
    if not local or not path.is_dir():
        return []
    found = []
    for entry in sorted(path.iterdir()):
        if table_shaped(entry.name) and not entry.is_dir():
            found.append(
                (
                    entry.name,
                    "a symlink" if entry.is_symlink() else "a regular file" if entry.is_file() else "not a folder",
                )
            )
    return found


def not_a_folder(what: str) -> str:
    return f"{what} where the table's folder belongs: its rows cannot be read (move it out of {TABLES}/)"


def is_table(uri: str, options: dict[str, str] | None) -> bool:
    return DeltaTable.is_deltatable(_unicode(uri), storage_options=options or None)


def _short(exc: BaseException, limit: int = 300) -> str:
    """The error in one line (delta-rs appends a Rust backtrace; its object store chains causes over
    many lines: runner.store.root.one_line keeps the server's code, or the failed connection's cause)."""
    return one_line(exc, limit)
