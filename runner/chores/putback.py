"""Putting checkpoints/ back from a purge's private folder (`RUN/.labprobe-purging-<hex>/`).

A put-back never replaces anything: checkpoints/ goes back by renameat2(RENAME_NOREPLACE); where
a trainer made a new checkpoints/ meanwhile, what was set aside is merged into it, folder by
folder, a file both hold kept twice (the one put back with a `.labprobe-restored-<hex>` suffix).
"""

from __future__ import annotations

import os
import secrets
import stat

from runner.chores.fstree import DIR_FLAGS, rename_noreplace
from runner.chores.scan import CHECKPOINTS

DELETING = ".deleting"
"""Mark in a `.labprobe-purging-*` folder: its deletion had begun (recovery finishes it)."""


def move_back(run_fd: int, holder: str) -> None:
    """checkpoints/ back where it was. A checkpoints/ made meanwhile (a trainer writing again) is
    never replaced: what was set aside is moved into it entry by entry, never over a name it has."""
    source = os.path.join(holder, CHECKPOINTS)
    try:
        os.unlink(os.path.join(holder, DELETING), dir_fd=run_fd)
    except FileNotFoundError:
        pass
    try:
        rename_noreplace(source, CHECKPOINTS, run_fd, run_fd)
    except FileExistsError:
        _merge_into(run_fd, source)
    except FileNotFoundError:  # nothing was left to put back
        pass
    os.rmdir(holder, dir_fd=run_fd)


def _merge_into(run_fd: int, source: str) -> None:
    """Every entry of `source` moved into checkpoints/: a folder both have is merged the same way
    (iteratively); a file both have stays, the one put back beside it with a suffix."""
    emptied: list[tuple[int, str]] = []  # source folders merged, removed once empty (deepest first)
    pairs = [(os.open(source, DIR_FLAGS, dir_fd=run_fd), os.open(CHECKPOINTS, DIR_FLAGS, dir_fd=run_fd))]
    try:
        while pairs:
            source_fd, target_fd = pairs.pop()
            try:
                for name in sorted(os.listdir(source_fd)):
                    try:
                        rename_noreplace(name, name, source_fd, target_fd)
                    except FileExistsError:
                        if not _both_folders(name, source_fd, target_fd):
                            rename_noreplace(
                                name, f"{name}.labprobe-restored-{secrets.token_hex(3)}", source_fd, target_fd
                            )
                            continue
                        pairs.append(
                            (os.open(name, DIR_FLAGS, dir_fd=source_fd), os.open(name, DIR_FLAGS, dir_fd=target_fd))
                        )
                        emptied.append((os.dup(source_fd), name))
            finally:
                os.close(source_fd)
                os.close(target_fd)
        for parent_fd, name in reversed(emptied):
            os.rmdir(name, dir_fd=parent_fd)
    finally:
        for parent_fd, _ in emptied:
            os.close(parent_fd)
    os.rmdir(source, dir_fd=run_fd)


def _both_folders(name: str, source_fd: int, target_fd: int) -> bool:
    return all(stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode) for fd in (source_fd, target_fd))
