"""One sweep per store at a time.

The lock is `<store>/.sweep.lock`, a file that stays; a sweep holds an exclusive `flock` on it for
its whole run and writes its holder info there (pid, host, run_id, plan, start time) for the "who
is running" message. The kernel drops the lock when the holding process dies, however it dies
(SIGKILL, a crash), so there is no stale lock to detect and take over, and no race between two
sweeps taking over the same dead holder: exactly one `flock` succeeds. The file is never removed
(removing it would let a late opener lock a file nobody else sees); on release it is emptied. On a
store on NFS, Linux maps `flock` to NFS byte-range locks, so it holds across the lab's hosts too.

On an object store (`s3://`) the lock is the object `<root>/.sweep.lock` with a lease, taken by a
conditional put and renewed while held (runner.store.lease): every host sees it. A holder that died
keeps the store for the rest of its lease (a minute), then the next command takes it over.

"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import stat
import sys
import time
from datetime import datetime
from pathlib import Path

from probes.result import InputError, loads
from runner.store import lease
from runner.store.root import LOCK, StoreRoot

LOCK_NAME = LOCK


class LockBusy(Exception):
    """Another sweep or chore holds the store: the message names it."""


class SweepLock:
    def __init__(
        self,
        store_root: StoreRoot | Path | str,
        *,
        run_id: str,
        plan: str,
        lease_s: float = lease.LEASE_S,
        wait_s: float = 0.0,
    ) -> None:
        place = StoreRoot.of(store_root)
        self.wait_s = wait_s
        """How long to wait for a running sweep to end before refusing: two hosts' sweeps into one store
        then run one after the other instead of the second failing."""
        self.where: Path | str = place.path if place.local else place.uri
        """The store, as messages name it."""
        self.path: Path | str = place.path / LOCK_NAME if place.local else place.join(LOCK_NAME)
        self.info = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "run_id": run_id,
            "plan": plan,
            "started_at": datetime.now().astimezone().isoformat(timespec="seconds"),
        }
        self._fd: int | None = None
        self._lease = None if place.local else lease.Lease(place, self.info, lease_s=lease_s)

    def acquire(self) -> None:
        """Take the lock, waiting up to wait_s for the running sweep to end; else raise InputError naming it
        (one line)."""
        deadline = time.monotonic() + self.wait_s
        said = False
        while True:
            try:
                return self._try_acquire()
            except LockBusy as busy:
                if time.monotonic() >= deadline:
                    raise InputError(str(busy)) from None
                if not said:  # once: the holder, and how long we wait for it
                    print(f"waiting up to {self.wait_s:g} s: {busy}", file=sys.stderr, flush=True)
                    said = True
                time.sleep(min(2.0, max(0.1, deadline - time.monotonic())))

    def _try_acquire(self) -> None:
        if self._lease is not None:
            held_by = self._lease.acquire()
            if held_by is not None:
                raise LockBusy(self._busy_message(held_by))
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = _open_lock(self.path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:  # --store naming a file, a read-only place, a link planted at the lock...
            raise InputError(
                f"store {self.path.parent}: cannot hold the sweep lock there: {exc.strerror or exc}"
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read(fd)
            os.close(fd)
            raise LockBusy(self._busy_message(holder)) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(self.info).encode(), 0)
        except OSError as exc:  # a full disk: the holder info does not fit
            os.close(fd)
            raise InputError(
                f"store {self.path.parent}: cannot write the sweep lock {self.path.name}: {exc.strerror or exc}"
            ) from None
        self._fd = fd

    def update(self, **info) -> None:
        """Add to the holder info (the plan's job counts once known) for `labprobe status`; a write
        that fails leaves the older info, which only `status` reads."""
        self.info.update(info)
        if self._lease is not None:
            self._lease.update(self.info)
            return
        if self._fd is None:
            return
        data = json.dumps(self.info).encode()
        try:
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))
        except OSError:
            pass

    def release(self) -> None:
        if self._lease is not None:
            self._lease.release()
            return
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)  # nobody holds it: no holder to name
        finally:
            os.close(fd)  # closing the last descriptor drops the flock

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def _busy_message(self, holder: dict | None) -> str:
        if not holder:  # the holder took the lock a moment ago and is writing its info
            return f"another sweep is running on this store (it is starting; lock {self.path})"
        return (
            f"another sweep is running on this store: pid {holder.get('pid')} on {holder.get('host')}, "
            f"run {holder.get('run_id')}, plan {holder.get('plan')!r}, started {holder.get('started_at')} "
            f"(lock {self.path}{lease_left(holder)})"
        )


def lease_left(holder: dict) -> str:
    """On an object store: how long the holder's lease runs without a renewal (a dead holder's, at most)."""
    left = holder.get("lease_left_s")
    return "" if left is None else f"; its lease runs out in {left} s unless renewed"


def holder(store_root: StoreRoot | Path | str) -> dict | None:
    """The running sweep's holder info when one holds `store_root`'s lock, else None."""
    place = StoreRoot.of(store_root)
    if not place.local:
        return lease.holder(place)
    try:
        fd = _open_lock(place.path / LOCK_NAME, os.O_RDONLY)
    except OSError:  # none, or not a lock file (a link, a FIFO): nobody holds it
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read(fd) or {}
    finally:
        os.close(fd)
    return None


def _open_lock(path: Path, flags: int) -> int:
    """The lock file opened without following a link or waiting on a FIFO, when it is a regular file of
    one name: a symlink or hard link planted at <store>/.sweep.lock had every sweep, store chore and purge
    truncate the file it named, outside the store. OSError otherwise, saying what it is."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        raise OSError(errno.EPERM, f"{path.name} is a symbolic link: remove it (labprobe makes its own)") from None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
        os.set_blocking(fd, True)
        return fd
    os.close(fd)
    what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink - 1} other names"
    raise OSError(errno.EPERM, f"{path.name} is {what}: remove it (labprobe makes its own)")


def _read(fd: int) -> dict | None:
    try:
        info = loads(os.pread(fd, 4096, 0).decode("utf-8"))
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) else None
