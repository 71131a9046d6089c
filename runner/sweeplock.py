"""One sweep per store at a time, and the sweep's deadline.

The lock is `<store>/.sweep.lock`, a small JSON file (pid, host, run_id, plan, start time) created
atomically: written to a temp file, then hard-linked into place, which fails if a lock exists, so
no reader ever sees a half-written lock and two sweeps cannot both win. A lock whose pid is dead
on this host is stale (a sweep killed with SIGKILL or a crashed machine): the next sweep takes it
over. A lock held from another host (a store on shared storage) cannot be checked from here and is
respected; remove it by hand if that host's sweep is known dead. (A recycled pid could make a
stale lock look alive; the message names the pid so a person can check.)

Deadline `HH:MM` (local time) means the occurrence of that clock time nearest to now: within the
past 12 hours it is already past (a late start: no new job starts), otherwise the next one. So
`--deadline 07:00` from a 22:00 cron entry is tomorrow morning, and the same entry started late at
07:30 starts nothing new.
"""

from __future__ import annotations

import json
import os
import re
import socket
from datetime import datetime, timedelta
from pathlib import Path

from probes.result import InputError

LOCK_NAME = ".sweep.lock"


class SweepLock:
    def __init__(self, store_root: Path, *, run_id: str, plan: str) -> None:
        self.path = Path(store_root) / LOCK_NAME
        self.info = {"pid": os.getpid(), "host": socket.gethostname(), "run_id": run_id, "plan": plan,
                     "started_at": datetime.now().astimezone().isoformat(timespec="seconds")}

    def acquire(self) -> None:
        """Take the lock, or raise InputError naming the running sweep (one line)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            if self._try_create():
                return
            holder = self._read()
            if holder is None or not self._stale(holder):
                raise InputError(self._busy_message(holder))
            # Stale: move it aside under a unique name; only one contender's rename succeeds.
            try:
                os.replace(self.path, self.path.with_name(f"{LOCK_NAME}.stale-{holder.get('pid')}-{os.getpid()}"))
            except FileNotFoundError:
                pass
        raise InputError(f"could not take the sweep lock {self.path}")

    def release(self) -> None:
        holder = self._read()
        if holder is not None and holder.get("run_id") == self.info["run_id"]:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _try_create(self) -> bool:
        tmp = self.path.with_name(f".sweep.lock.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.info), encoding="utf-8")
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)

    def _read(self) -> dict | None:
        try:
            return json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            return None

    def _stale(self, holder: dict) -> bool:
        if not holder:  # vanished between our attempt and the read: try again
            return True
        if holder.get("host") != socket.gethostname():
            return False
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return True
        except (PermissionError, KeyError, ValueError, TypeError):
            return False
        return False

    def _busy_message(self, holder: dict | None) -> str:
        if holder is None:
            return f"another sweep holds {self.path} (unreadable lock); remove it if no sweep runs"
        return (f"another sweep is running on this store: pid {holder.get('pid')} on {holder.get('host')}, "
                f"run {holder.get('run_id')}, plan {holder.get('plan')!r}, started {holder.get('started_at')} "
                f"(lock {self.path})")


def parse_deadline(text: str, *, now: datetime | None = None) -> float:
    """`HH:MM` (local time) -> epoch seconds: the occurrence nearest to now (see module docstring)."""
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", text.strip())
    if not match:
        raise InputError(f"--deadline: expected HH:MM (24-hour local time), got {text!r}")
    now = now or datetime.now().astimezone()
    today = now.replace(hour=int(match[1]), minute=int(match[2]), second=0, microsecond=0)
    if today <= now - timedelta(hours=12):
        today += timedelta(days=1)
    elif today > now + timedelta(hours=12):
        today -= timedelta(days=1)
    return today.timestamp()
