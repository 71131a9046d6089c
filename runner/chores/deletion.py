"""Carrying out an approved purge plan on one host: runs there (in a pinned Ray task), no Ray here.

The order closes the window in which a swap (an adapter's weights, or adapter/ itself, replaced by
a symlink into checkpoints/) could make a deletion take final weights:
1. every adapter under the root is digested (what the deletion is held to);
2. the root is scanned again (runner.chores.scan): only a run still removable and approved goes;
3. each such checkpoints/ is renamed aside, atomically, into a fresh private folder of its own run
   (`.labprobe-purging-<hex>/checkpoints`): from then on any link into checkpoints/ dangles, and
   nothing can move into the tree by its old path;
4. every adapter is digested again: if any differs from (1), every tree set aside is put back and
   nothing is deleted;
5. the trees set aside are deleted through fds that never follow a link nor enter a mount;
6. every adapter is digested a last time: each row says whether its adapter is verified.
A purge killed between 3 and 5 leaves the folder set aside; the next plan names it.
"""

from __future__ import annotations

import dataclasses
import os
import secrets

from runner.chores.fstree import (
    DIR_FLAGS,
    UNVERIFIABLE,
    readable,
    remove_tree,
    tree_digests,
)
from runner.chores.mounts import sync_filesystem
from runner.chores.scan import (
    ADAPTER,
    ASIDE_PREFIX,
    CHECKPOINTS,
    ActionRow,
    resolve_root,
    scan_root,
)

Digests = dict[str, "dict[str, str] | None"]


@dataclasses.dataclass
class Executed:
    actions: list[ActionRow]
    avail_before: dict[int, int]
    """st_dev -> bytes available to users there before the first deletion, and after the last."""
    avail_after: dict[int, int]


def adapter_digests(run_path: str) -> dict[str, str] | None:
    """sha256 of every file of the run's adapter (fstree.tree_digests); None without one. An
    adapter/ that is a link to no directory (dangling once what it led to is set aside) is an
    adapter that could not be read, not a run without one."""
    adapter = os.path.join(run_path, ADAPTER)
    if os.path.isdir(adapter):
        return tree_digests(adapter)
    return {"": f"{UNVERIFIABLE}adapter/ is a symlink to no directory"} if os.path.islink(adapter) else None


def changed_adapters(before: Digests, now: Digests) -> list[str]:
    """Runs whose adapter differs from `before`; a run new since then counts when its adapter
    holds something unreadable (a link into what was set aside, say)."""
    return [
        name
        for name, digests in now.items()
        if (
            digests != before[name]
            if name in before
            else digests is not None and any(v.startswith(UNVERIFIABLE) for v in digests.values())
        )
    ]


def all_digests(root: str) -> Digests:
    """Every run's adapter under the root, not only the selected runs': one run's checkpoints/
    could be what another run's adapter rests on (refused, and verified all the same)."""
    try:
        names = sorted(os.listdir(root))
    except OSError:  # the root gone: every adapter reads as lost, and the rows are kept
        return {}
    return {name: adapter_digests(os.path.join(root, name)) for name in names}


def verdict(before: dict[str, str] | None, after: dict[str, str] | None) -> bool | None:
    """False: changed or lost. True: every file read, all equal. None: no adapter, or something
    in it could not be read (a digest that did not read everything verifies nothing)."""
    if before != after:
        return False
    if before is None or any(v.startswith(UNVERIFIABLE) for v in before.values()):
        return None
    return True


def execute(runs_root: str, run_glob: str, planned: list[str], host: str = "") -> Executed:
    """Delete the planned `checkpoints/` (the plan's readable paths, as the operator saw them)
    and report: a run refused now is left alone; a run removable now but not in the plan is
    left alone (it was not approved)."""
    root = resolve_root(runs_root)
    before = all_digests(root)
    rows = scan_root(root, run_glob, host)
    approved = set(planned)
    todo = [r for r in rows if r.path in approved and r.action == "remove"]
    avail_before = _avail_by_dev(todo)
    done = {r.path: r for r in _carry_out(root, todo, before)}
    outcome = []
    for row in rows:
        if row.path not in approved:
            reason = row.reason or "not in the plan that was shown (appeared since): left alone"
            outcome.append(dataclasses.replace(row, action="refuse", reason=reason))
        elif row.action != "remove":
            outcome.append(dataclasses.replace(row, reason=f"at deletion: {row.reason}"))
        else:
            outcome.append(done[row.path])
    gone = approved - {r.path for r in rows}
    outcome += [
        ActionRow(
            host=host,
            run=os.path.basename(os.path.dirname(p)),
            path=p,
            bytes=0,
            alloc_bytes=0,
            num_files=0,
            action="refuse",
            reason="at deletion: no longer found",
        )
        for p in sorted(gone)
    ]
    outcome += _verify(root, host, outcome, before)
    return Executed(actions=outcome, avail_before=avail_before, avail_after=_avail_by_dev(todo))


@dataclasses.dataclass
class _Aside:
    row: ActionRow
    run: str
    """The run directory's name as os functions take it."""
    holder: str
    """The private folder holding its checkpoints/ now."""


def _carry_out(root: str, todo: list[ActionRow], before: Digests) -> list[ActionRow]:
    """Steps 3 to 5 for the runs to delete; one row back for each."""
    root_fd = os.open(root, DIR_FLAGS)
    try:
        asides, results = [], []
        for row in todo:
            try:
                asides.append(_set_aside(root_fd, row))
            except OSError as exc:
                results.append(
                    dataclasses.replace(
                        row,
                        action="failed",
                        reason=(f"could not set checkpoints/ aside ({_why(exc)}): nothing removed"),
                    )
                )
        try:
            changed = changed_adapters(before, all_digests(root))
        except BaseException:  # interrupted before anything was deleted: leave the runs as found
            _put_back_all(root_fd, asides, "")
            raise
        if changed:
            why = (
                f"at deletion: the final adapter of {readable(', '.join(changed[:3]))} changed while "
                "checkpoints/ were set aside: every checkpoints/ put back, nothing removed"
            )
            return results + _put_back_all(root_fd, asides, why)
        return results + [_delete_aside(root_fd, aside) for aside in asides]
    finally:
        os.close(root_fd)


def _set_aside(root_fd: int, row: ActionRow) -> _Aside:
    """Rename the run's checkpoints/ into a fresh private folder of the run (same directory
    tree, one filesystem: atomic), then check it is the directory the scan approved."""
    run = os.path.basename(os.path.dirname(row.real_path))
    run_fd = os.open(run, DIR_FLAGS, dir_fd=root_fd)
    try:
        holder = ASIDE_PREFIX + secrets.token_hex(6)
        os.mkdir(holder, 0o700, dir_fd=run_fd)
        moved = os.path.join(holder, CHECKPOINTS)
        try:
            os.rename(CHECKPOINTS, moved, src_dir_fd=run_fd, dst_dir_fd=run_fd)
        except OSError:
            os.rmdir(holder, dir_fd=run_fd)
            raise
        st = os.stat(moved, dir_fd=run_fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != (row.dev, row.ino):
            try:
                _move_back(run_fd, holder)
            except OSError as exc:
                raise OSError(
                    f"checkpoints/ was replaced since it was checked, and could not be put back "
                    f"({exc.strerror or exc}): it is in {readable(holder)}"
                ) from exc
            raise OSError("checkpoints/ was replaced since it was checked")
    finally:
        os.close(run_fd)
    return _Aside(row=row, run=run, holder=holder)


def _move_back(run_fd: int, holder: str) -> None:
    """checkpoints/ back where it was, never over a checkpoints/ made meanwhile."""
    try:
        os.stat(CHECKPOINTS, dir_fd=run_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(os.path.join(holder, CHECKPOINTS), CHECKPOINTS, src_dir_fd=run_fd, dst_dir_fd=run_fd)
        os.rmdir(holder, dir_fd=run_fd)
        return
    raise OSError(f"a new {CHECKPOINTS}/ appeared meanwhile")


def _put_back_all(root_fd: int, asides: list[_Aside], why: str) -> list[ActionRow]:
    rows = []
    for aside in asides:
        try:
            run_fd = os.open(aside.run, DIR_FLAGS, dir_fd=root_fd)
            try:
                _move_back(run_fd, aside.holder)
            finally:
                os.close(run_fd)
            rows.append(dataclasses.replace(aside.row, action="refuse", reason=why))
        except OSError as exc:
            where = os.path.join(os.path.dirname(aside.row.path), readable(aside.holder), CHECKPOINTS)
            rows.append(
                dataclasses.replace(
                    aside.row,
                    action="failed",
                    reason=(f"{why}; but checkpoints/ could not be put back ({_why(exc)}): it is at {where}"),
                )
            )
    return rows


def _delete_aside(root_fd: int, aside: _Aside) -> ActionRow:
    try:
        run_fd = os.open(aside.run, DIR_FLAGS, dir_fd=root_fd)
        try:
            holder_fd = os.open(aside.holder, DIR_FLAGS, dir_fd=run_fd)
            try:
                remove_tree(CHECKPOINTS, holder_fd, (aside.row.dev, aside.row.ino))
            finally:
                os.close(holder_fd)
            os.rmdir(aside.holder, dir_fd=run_fd)
        finally:
            os.close(run_fd)
    except OSError as exc:
        where = os.path.join(os.path.dirname(aside.row.path), readable(aside.holder))
        return dataclasses.replace(
            aside.row,
            action="failed",
            reason=(f"removal stopped ({_why(exc)}); checkpoints/ may be partly removed: what remains is in {where}"),
        )
    return dataclasses.replace(aside.row, action="removed")


def _why(exc: OSError) -> str:
    """The error as readable text (the file it names may not be UTF-8)."""
    return readable(f"{exc.strerror}: {exc.filename}" if exc.strerror and exc.filename else (exc.strerror or str(exc)))


def _verify(root: str, host: str, outcome: list[ActionRow], before: Digests) -> list[ActionRow]:
    """Digest every adapter again: the verdict goes on each selected run's row; an unselected run
    whose adapter changed gets a `failed` row of its own."""
    after = all_digests(root)
    raw = {readable(name): name for name in before}
    for row in outcome:
        row.phase = "outcome"
        name = raw.get(row.run, row.run)
        row.adapter_digests_verified = verdict(before.get(name), after.get(name))
    selected = {r.run for r in outcome}
    return [
        ActionRow(
            host=host,
            run=readable(name),
            path=readable(os.path.join(root, name, ADAPTER)),
            bytes=0,
            alloc_bytes=0,
            num_files=0,
            action="failed",
            phase="outcome",
            reason="the final adapter of a run not selected changed during the purge",
            adapter_digests_verified=False,
        )
        for name in before
        if readable(name) not in selected and before[name] != after.get(name)
    ]


def _avail_by_dev(rows: list[ActionRow]) -> dict[int, int]:
    """Bytes available to users on each filesystem holding one of `rows`, measured now."""
    paths = {r.dev: os.path.dirname(r.real_path) for r in rows}
    out = {}
    for dev, path in paths.items():
        try:
            sync_filesystem(path)  # pending frees flushed: the figure is the filesystem's, not the cache's
            vfs = os.statvfs(path)
        except OSError:  # the run went meanwhile: no figure rather than no outcome
            continue
        out[dev] = vfs.f_bavail * vfs.f_frsize
    return out
