"""`labprobe store repair`: put right what `store check` finds, never deleting a row it can read.

Per table (local stores; an object store has no commit files to check here):
- a lost log (a folder holding rows of committed jobs and no `_delta_log`): the table is made again
  from its data files, one commit. Compaction leaves the files it replaced until vacuum, so one
  job's rows can be in several files: each (job_id, run_id) is taken from one file only.
- a newest commit file that is not JSON (a commit cut mid-line: the table cannot be opened): it is
  moved out of the log into `<root>/repairs/<table>/` (kept, never deleted), which opens the table
  at the version before; the rows it added are found again below.
- commit files that lost actions, live files that are unreadable or not what the log recorded: the
  table's rows are gathered from every data file in its folder that can be read (the live files
  first, then the files no version uses any more, which hold what a truncated commit lost), one
  (job_id, run_id) from one file, and committed as the table's new version (an overwrite: a new
  version, the old files stay for time travel until vacuum). A row that cannot be read is lost
  already; every row that can be read is kept.
- then the damaged commit files are recorded in `<root>/repairs.json` (their name and sha256):
  `store check` no longer counts them (they are history now), and counts them again if they change.
Nothing is deleted: not a data file, not a commit file.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from probes.result import loads
from runner.store import delta, owned
from runner.store.logcheck import REPAIRS, _commit_problem, commit_problems, sha256

ASIDE = "repairs"
"""At the store's root: commit files moved out of a log, per table."""


@dataclasses.dataclass
class Repaired:
    table: str
    what: str
    """What was done, or (left_alone) why nothing was."""
    rows: int
    """Rows in the table's new version (0: nothing rewritten)."""
    left_alone: bool = False


def repair(store) -> list[Repaired]:
    """Repair every table of a local store that `store check` finds broken; -> what was done. A table
    whose folder or log is a link or another mount, or a store whose repairs/ is, is left alone (said
    so): repair writes there, and moves a commit file out of the log."""
    from runner.store.maintain import check

    done = []
    for state in check(store).tables:
        if state.unreadable:
            why = _not_ours(store, state.name)
            done.append(Repaired(state.name, why, 0, left_alone=True) if why else _repair_table(store, state.name))
    return done


def _not_ours(store, name: str) -> str | None:
    """Why repair must not write in table `name`'s folder, its log or the store's repairs/ (a link on
    the way, another mount: the files there are not the store's), or None."""
    root = str(store.root)
    for rel in (f"{delta.TABLES}/{name}/_delta_log", f"{ASIDE}/{name}"):
        why = owned.folder_problem(root, rel)
        if why:
            return why
    return None


def _repair_table(store, name: str) -> Repaired:
    folder = Path(store.root) / delta.TABLES / name
    if not (folder / "_delta_log").is_dir() or not any((folder / "_delta_log").glob("*.json")):
        files = delta.data_files(folder)
        rows = _gather(files, set())
        delta.append(store.table_uri(name), rows, store.storage_options)
        return Repaired(name, f"made again from {len(files)} data file(s)", rows.num_rows)
    moved = _move_unparsable_newest(store, name, folder)
    table = store.table(name)
    trusted, suspect = _live_files(table, folder)
    # A live file the log does not vouch for (its size or statistics differ) comes last: the files
    # compaction replaced hold the same jobs' rows as the log recorded them.
    rest = [p for p in delta.data_files(folder) if p not in set(trusted) | set(suspect)] + suspect
    rows = _gather(trusted, set()) if trusted else None
    extra = _gather(rest, _pairs(rows) if rows is not None else set())
    rows = extra if rows is None else pa.concat_tables([rows, extra], promote_options="permissive")
    delta.overwrite(table, rows)
    _acknowledge(store.root, name, folder)
    what = "rows gathered from every readable data file" + (f"; moved {moved} out of the log" if moved else "")
    return Repaired(name, what, rows.num_rows)


def _live_files(table, folder: Path) -> tuple[list[Path], list[Path]]:
    """The table's live files: (those matching what the log recorded, those that do not)."""
    raw = delta.live_files(table).column("path").to_pylist()
    bad = {uri for uri, _why in delta.mismatched_files(table, deep=True)}
    paths = dict(zip(raw, _live_paths(table)))
    trusted = [folder / paths[p] for p in raw if delta.join(table.table_uri, p) not in bad]
    return trusted, [folder / paths[p] for p in raw if delta.join(table.table_uri, p) in bad]


def _live_paths(table) -> list[str]:
    from urllib.parse import unquote

    return [delta.os_path(unquote(p)) for p in delta.live_files(table).column("path").to_pylist()]


def _gather(files: list[Path], taken: set[tuple[str, str]]) -> pa.Table:
    """Every readable row of `files` whose (job_id, run_id) is not in `taken` nor in an earlier file."""
    parts = []
    taken = set(taken)
    for path in files:
        try:
            with delta.open_regular(path) as handle:
                rows = pq.ParquetFile(handle, pre_buffer=False).read()
        except Exception:  # missing, cut short, not Parquet, a FIFO: nothing here can be read
            continue
        if "job_id" not in rows.column_names or "run_id" not in rows.column_names:
            continue
        pairs = list(zip(rows.column("job_id").to_pylist(), rows.column("run_id").to_pylist()))
        mine = {p for p in pairs if p not in taken}
        keep = pa.array([p in mine for p in pairs], pa.bool_())
        if mine:
            parts.append(rows.filter(keep))
            taken |= mine
    if not parts:
        return pa.table({"job_id": pa.array([], pa.string()), "run_id": pa.array([], pa.string())})
    return pa.concat_tables(parts, promote_options="permissive")


def _pairs(rows: pa.Table) -> set[tuple[str, str]]:
    return set(zip(rows.column("job_id").to_pylist(), rows.column("run_id").to_pylist()))


def _move_unparsable_newest(store, name: str, folder: Path) -> str | None:
    """Move the newest commit file out of the log when a line of it is not JSON; -> its name."""
    log = folder / "_delta_log"
    versions = sorted(p for p in log.glob("*.json") if p.stem.isdigit())
    if not versions or "is not JSON" not in (_commit_problem(versions[-1]) or ""):
        return None
    aside = Path(store.root) / ASIDE / name
    aside.mkdir(parents=True, exist_ok=True)
    os.replace(versions[-1], aside / versions[-1].name)
    for stale in log.glob("_last_checkpoint"):  # naming the version just moved: Delta reads the log again
        if _checkpoint_version(stale) in (None, int(versions[-1].stem)):
            os.replace(stale, aside / stale.name)
    return versions[-1].name


def _acknowledge(root: Path, name: str, folder: Path) -> None:
    """Record every commit file of the table that check would flag: it is history now."""
    path = Path(root) / REPAIRS
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    data = data if isinstance(data, dict) else {}
    tables = data["tables"] = data.get("tables") if isinstance(data.get("tables"), dict) else {}
    mine = tables[name] = tables.get(name) if isinstance(tables.get(name), dict) else {}
    for file, _why in commit_problems(folder, acknowledged={}):
        mine[Path(file).name] = sha256(Path(file)) if Path(file).is_file() else "gap"
    tmp = path.parent / f".{REPAIRS}.tmp-{os.getpid()}"
    tmp.unlink(missing_ok=True)  # a name left by a killed repair; a link planted there is never written through
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def _checkpoint_version(path: Path) -> int | None:
    """The version a _last_checkpoint file names (None: unreadable)."""
    try:
        version = loads(path.read_text(encoding="utf-8")).get("version")
    except (OSError, ValueError, AttributeError):
        return None
    return version if isinstance(version, int) else None
