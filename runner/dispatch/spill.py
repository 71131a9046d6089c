"""When the store cannot take a result: find out before any job runs, and never lose one computed.

`check_writable(root)` writes (and syncs) and removes a small file in the store's root before a sweep
hands out its first job: a read-only, full or vanished store, a missing bucket or refused credentials
are one line (exit 2) then, not every job computed and thrown away at its write. It writes beside the tables rather than through them
(the store's own API has no such check yet); a store that takes this file but refuses a table
write still reaches the spill below.

`Spill` is where results go once a write failed mid-sweep: one JSON line per job (its key, status,
reason, timing, env, and the probe's result as `labprobe probe --json` prints it: summary, tables,
checks), appended and flushed per job, in $TMPDIR
(the store's disk may be the full one), in a file the spill makes itself (0600, never through a link
or into a file planted under its name). `read_spill` reads it back.
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

from probes.result import loads, to_jsonable
from runner.store.root import StoreRoot


def check_writable(root: Path | str) -> None:
    """InputError naming the store unless a file can be written and removed under `root` (a folder or
    an object-store URL): runner.store.root.StoreRoot.check_writable."""
    StoreRoot.of(root).check_writable()


class Spill:
    """JSON lines of the results the store refused, one per job, in a file named after the run."""

    def __init__(self, run_id: str, folder: Path | None = None) -> None:
        self.path = Path(folder) / f"labprobe-spill-{run_id}.jsonl" if folder else StoreRoot.spill(run_id)
        self.num_jobs = 0
        self._made: tuple[int, int] | None = None
        """(st_dev, st_ino) of the file this spill made: the only one it appends to."""

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
        with os.fdopen(self._open(), "a", encoding="utf-8") as handle:
            handle.write(line + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.num_jobs += 1

    def _open(self) -> int:
        """A descriptor appending to this spill's own file. $TMPDIR is everyone's and the name is the run
        id's: the first add makes the file (O_EXCL, 0600, no link followed); a name already taken (a link
        or a file planted there) gives a fresh unique name beside it. Later adds append only to that file."""
        flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        if self._made is None:
            try:
                fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                fd, name = tempfile.mkstemp(prefix=f"{self.path.stem}-", suffix=".jsonl", dir=self.path.parent)
                self.path = Path(name)
            st = os.fstat(fd)
            self._made = (st.st_dev, st.st_ino)
            return fd
        fd = os.open(self.path, flags)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self._made:
            os.close(fd)
            raise OSError(f"{self.path} is no longer the spill file this sweep made: not appended to")
        return fd


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, datetime) else str(value)


def read_spill(path: Path) -> Iterator[dict]:
    """The spilled jobs of `path`, as written (datetimes as ISO text)."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield loads(line)
