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
from runner.store import delta
from runner.store.logcheck import REPAIRS, _commit_problem, commit_problems, sha256

ASIDE = "repairs"
"""At the store's root: commit files moved out of a log, per table."""


@dataclasses.dataclass
class Repaired:
    table: str
    what: str
    rows: int
    """Rows in the table's new version (0: nothing rewritten)."""


def repair(store) -> list[Repaired]:
    """Repair every table of a local store that `store check` finds broken; -> what was done."""
    from runner.store.maintain import check

    done = []
    for state in check(store).tables:
        if not state.unreadable:
            continue
        folder = Path(store.root) / delta.TABLES / state.name
        if not (folder / "_delta_log").is_dir() or not any((folder / "_delta_log").glob("*.json")):
            files = delta.data_files(folder)
            rows = _gather(files, set())
            delta.append(store.table_uri(state.name), rows, store.storage_options)
            done.append(Repaired(state.name, f"made again from {len(files)} data file(s)", rows.num_rows))
            continue
        moved = _move_unparsable_newest(store, state.name, folder)
        table = store.table(state.name)
        live = [folder / p for p in _live_paths(table)]
        rest = [p for p in delta.data_files(folder) if p not in set(live)]
        rows = _gather(live, set()) if live else None
        extra = _gather(rest, _pairs(rows) if rows is not None else set())
        rows = extra if rows is None else pa.concat_tables([rows, extra], promote_options="permissive")
        delta.overwrite(table, rows)
        _acknowledge(store.root, state.name, folder)
        what = "rows gathered from every readable data file" + (f"; moved {moved} out of the log" if moved else "")
        done.append(Repaired(state.name, what, rows.num_rows))
    return done


def _live_paths(table) -> list[str]:
    from urllib.parse import unquote

    return [delta.os_path(unquote(p)) for p in delta.live_files(table).column("path").to_pylist()]


def _gather(files: list[Path], taken: set[tuple[str, str]]) -> pa.Table:
    """Every readable row of `files` whose (job_id, run_id) is not in `taken` nor in an earlier file."""
    parts = []
    taken = set(taken)
    for path in files:
        try:
            with open(path, "rb") as handle:
                rows = pq.ParquetFile(handle, pre_buffer=False).read()
        except Exception:  # missing, cut short, not Parquet: nothing here can be read
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
    for stale in log.glob("_last_checkpoint"):  # may name the version just moved: Delta reads the log again
        if str(int(versions[-1].stem)) in stale.read_text(errors="replace"):
            os.replace(stale, aside / stale.name)
    return versions[-1].name


def _acknowledge(root: Path, name: str, folder: Path) -> None:
    """Record every commit file of the table that check would flag: it is history now."""
    path = Path(root) / REPAIRS
    try:
        data = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = {}
    tables = data.setdefault("tables", {})
    mine = tables.setdefault(name, {})
    for file, _why in commit_problems(folder, acknowledged={}):
        mine[Path(file).name] = sha256(Path(file)) if Path(file).is_file() else "gap"
    tmp = path.parent / f".{REPAIRS}.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
