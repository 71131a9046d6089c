"""When the store cannot take a result: find out before any job runs, and never lose one computed.

`check_writable(root)` writes, syncs and removes a small file in the store's root before a sweep
hands out its first job: a read-only, full or vanished store is one line (exit 2) then, not every
job computed and thrown away at its write. It writes beside the tables rather than through them
(the store's own API has no such check yet); a store that takes this file but refuses a table
write still reaches the spill below.

`Spill` is where results go once a write failed mid-sweep: one JSON line per job (its key, status,
reason, timing, env, and the probe's result as `labprobe probe --json` prints it: summary, tables,
checks), appended and flushed per job, in $TMPDIR
(the store's disk may be the full one). `read_spill` reads it back.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from probes.result import InputError, loads, to_jsonable

CHECK_BYTES = 64 * 1024
"""Written and synced by the check: a disk with less room than this cannot take a result file."""


def check_writable(root: Path) -> None:
    """InputError naming the store unless a file can be created, filled, synced and removed in `root`."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise InputError(f"store {root}: not a folder (--store or store.root names a file); no job was run")
    probe = root / f".write-check-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, b"\0" * CHECK_BYTES)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise InputError(f"store {root}: cannot be written ({exc.strerror or exc}); no job was run") from None
    finally:
        try:
            probe.unlink()
        except OSError:  # never created, or the store vanished meanwhile: nothing left behind
            pass


class Spill:
    """JSON lines of the results the store refused, one per job, in a file named after the run."""

    def __init__(self, run_id: str, folder: Path | None = None) -> None:
        self.path = Path(folder or tempfile.gettempdir()) / f"labprobe-spill-{run_id}.jsonl"
        self.num_jobs = 0

    def add(
        self,
        key: Any,
        *,
        status: str,
        reason: str,
        started_at: datetime,
        wall_s: float,
        env: dict,
        config: dict,
        plan: str,
        result: Any = None,
    ) -> None:
        """One job's outcome; `result` (a ProbeResult) adds its summary, tables and checks. Raises OSError."""
        record = {
            "key": dataclasses.asdict(key),
            "status": status,
            "reason": reason,
            "started_at": started_at,
            "wall_s": wall_s,
            "env": env,
            "config": config,
            "plan": plan,
            "result": None if result is None else result.to_json_dict(),
        }
        line = json.dumps(to_jsonable(record), sort_keys=True, default=_text)
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.num_jobs += 1


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def read_spill(path: Path) -> Iterator[dict]:
    """The spilled jobs of `path`, as written (datetimes as ISO text)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield loads(line)
