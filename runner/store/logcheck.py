"""The commit files of a local table's log, checked line by line: what delta-rs reads silently.

A Delta table's version N is `_delta_log/<N>.json`, one JSON action a line (commitInfo, add,
remove, metaData, ...). delta-rs reads an emptied commit file as a commit with no actions, and one
cut after its commitInfo line as a commit that added nothing: a job row is then silently gone and
the table still opens. So each commit file is read here: it must be non-empty, every line a JSON
object, and it must hold as many add (and remove) actions as its commitInfo's metrics say it wrote
(delta-rs writes `num_added_files` for appends, `numFilesAdded` for compaction). Versions must
follow one another from the oldest kept to the newest (cleanup removes the oldest, never a middle one).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from probes.result import loads

REPAIRS = "repairs.json"
"""At the store's root: table -> {commit file name: sha256} of the commit files `store repair` dealt with."""
ADDED = ("num_added_files", "numFilesAdded")
REMOVED = ("num_removed_files", "numFilesRemoved")


def commit_problems(table_folder: Path, acknowledged: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """(commit file, why) for every commit file of the table's log that lost or garbled actions,
    but those `labprobe store repair` dealt with (`acknowledged`: commit file name -> its sha256 then,
    or "gap" for missing versions; by default read from the store root's repairs.json)."""
    done = recorded(table_folder.parent.parent, table_folder.name) if acknowledged is None else acknowledged
    log = table_folder / "_delta_log"
    versions = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit())
    problems = []
    for before, after in zip(versions, versions[1:]):
        if after != before + 1 and done.get(log.name) != "gap":
            problems.append((str(log), f"commit versions {before + 1} to {after - 1} are missing from the log"))
    for version in versions:
        path = log / f"{version:020d}.json"
        why = _commit_problem(path)
        if why and not (path.name in done and done[path.name] == sha256(path)):
            problems.append((str(path), why))
    return problems


def _commit_problem(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot be read: {exc}"
    if not text.strip():
        return "empty commit file: the commit's actions (its rows) are lost"
    counts = {"add": 0, "remove": 0}
    metrics: dict = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            action = loads(line)
        except ValueError:
            return f"line {number} is not JSON: the commit file is truncated or corrupt"
        if not isinstance(action, dict) or len(action) != 1:
            return f"line {number} is not one Delta action"
        kind = next(iter(action))
        if kind in counts:
            counts[kind] += 1
        elif kind == "commitInfo" and isinstance(action[kind], dict):
            metrics = action[kind].get("operationMetrics") or {}
    for kind, keys in (("add", ADDED), ("remove", REMOVED)):
        said = next((metrics[k] for k in keys if isinstance(metrics.get(k), int)), None)
        if said is not None and said != counts[kind]:
            return f"holds {counts[kind]} {kind} action(s) where its commit wrote {said}: truncated"
    return None


def recorded(root: Path, name: str) -> dict[str, str]:
    """Commit file name -> sha256 of the commit files of table `name` that repair recorded."""
    try:
        tables = loads((root / REPAIRS).read_text(encoding="utf-8")).get("tables", {})
    except (OSError, ValueError, AttributeError):
        return {}
    found = tables.get(name, {}) if isinstance(tables, dict) else {}
    return found if isinstance(found, dict) else {}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
