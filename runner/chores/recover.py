"""`labprobe purge --recover`: what an interrupted purge left set aside, finished or undone.

A purge killed (SIGKILL, a power cut) between renaming a run's checkpoints/ aside and deleting it
leaves `RUN/.labprobe-purging-<hex>/`. Holding the mark `.deleting`, its deletion had begun: the
adapters were verified, and what remains of the tree is partial: the deletion is finished
(`removed`). Without the mark nothing was deleted yet: checkpoints/ is put back (`restored`), or,
where a trainer made a new checkpoints/ meanwhile, its entries are merged into it, never over a
name it has. Runs on the host (a pinned Ray task), under the runs root's lock.
"""

from __future__ import annotations

import os

from runner.chores.fstree import DIR_FLAGS, readable, remove_tree, walk_tree
from runner.chores.putback import DELETING, move_back
from runner.chores.scan import ASIDE_PREFIX, CHECKPOINTS, ActionRow, resolve_root


def recover(runs_root: str, host: str = "") -> list[ActionRow]:
    """One row per folder set aside under the runs root: removed, restored or failed."""
    root = resolve_root(runs_root)
    rows = []
    for name in sorted(os.listdir(root)):
        try:
            run_fd = os.open(os.path.join(root, name), DIR_FLAGS)
        except OSError:  # not a directory, a symlink, gone
            continue
        try:
            holders = sorted(e for e in os.listdir(run_fd) if e.startswith(ASIDE_PREFIX))
            rows += [_recover_one(root, name, run_fd, holder, host) for holder in holders]
        finally:
            os.close(run_fd)
    return rows


def _recover_one(root: str, name: str, run_fd: int, holder: str, host: str) -> ActionRow:
    aside = os.path.join(root, name, holder, CHECKPOINTS)
    tree = walk_tree(aside, CHECKPOINTS) if os.path.isdir(aside) else None
    row = ActionRow(
        host=host,
        run=readable(name),
        path=readable(os.path.join(root, name, holder)),
        bytes=tree.bytes if tree else 0,
        alloc_bytes=tree.alloc_bytes if tree else 0,
        num_files=tree.num_files if tree else 0,
        action="restored",
        phase="recover",
    )
    try:
        if os.path.lexists(os.path.join(root, name, holder, DELETING)):
            _finish(run_fd, holder)
            row.action = "removed"
            row.reason = "its deletion had begun: finished"
        else:
            move_back(run_fd, holder)
            row.reason = "nothing of it was deleted: put back as checkpoints/"
    except Exception as exc:  # noqa: BLE001 - any failure is this folder's row, never a crash
        row.action = "failed"
        row.reason = readable(f"could not recover it ({getattr(exc, 'strerror', None) or exc}): it stays where it is")
    return row


def _finish(run_fd: int, holder: str) -> None:
    holder_fd = os.open(holder, DIR_FLAGS, dir_fd=run_fd)
    try:
        try:
            remove_tree(CHECKPOINTS, holder_fd)
        except FileNotFoundError:  # killed after the tree went, before the folder did
            pass
        os.unlink(DELETING, dir_fd=holder_fd)
    finally:
        os.close(holder_fd)
    os.rmdir(holder, dir_fd=run_fd)
