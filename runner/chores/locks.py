"""The locks a purge holds: the store's (the one `sweep` and `store compact/vacuum/migrate` take,
runner.dispatch.lock), so no store chore runs beside it, and one per runs root, taken on the
host by each of its tasks, so two purges never work on one runs root at once (whatever store
each writes to). Both are `flock`s the kernel drops when the holder dies, however it dies.

The runs root's lock is a flock on the runs root directory itself (nothing is written there);
where the filesystem refuses a flock on a directory (NFS maps flock to byte-range locks, which
want a file open for writing) it is the file `.labprobe-purge.lock` in the runs root.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from probes.result import InputError
from runner.dispatch.lock import SweepLock, lease_left
from runner.store.root import StoreRoot

ROOT_LOCK_FILE = ".labprobe-purge.lock"


class StoreLock(SweepLock):
    """The store's lock, held by a purge: its refusal names whichever chore holds it."""

    def _busy_message(self, holder: dict | None) -> str:
        if not holder:
            return f"store {self.where} is busy: another labprobe command holds its lock {self.path}"
        return (
            f"store {self.where} is busy: {holder.get('plan') or 'a sweep'} (pid {holder.get('pid')} on "
            f"{holder.get('host')}, run {holder.get('run_id')}, started {holder.get('started_at')}) holds its "
            f"lock {self.path}{lease_left(holder)}; try again when it is done"
        )


@contextlib.contextmanager
def store_lock(root: StoreRoot | Path | str, run_id: str, what: str) -> Iterator[None]:
    """The store's lock for the whole purge: a flock on a local store, a lease object on an object store."""
    lock = StoreLock(root, run_id=run_id, plan=what)
    lock.acquire()
    try:
        yield
    finally:
        lock.release()


@contextlib.contextmanager
def root_lock(root: str) -> Iterator[None]:
    """This host's lock on its runs root, or InputError (one line) when another purge holds it."""
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise InputError(f"runs root {root}: cannot be opened ({exc.strerror})") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, BlockingIOError):
            raise InputError(_busy(root)) from None
        fd = _file_lock(root)
    try:
        yield
    finally:
        os.close(fd)  # the last descriptor closed drops the flock


def _file_lock(root: str) -> int:
    path = os.path.join(root, ROOT_LOCK_FILE)
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise InputError(f"runs root {root}: cannot hold the purge lock {path}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise InputError(_busy(root)) from None
    return fd


def _busy(root: str) -> str:
    return f"runs root {root}: another purge is running there (it holds the runs root's lock); try again later"
