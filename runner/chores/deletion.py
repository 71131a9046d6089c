"""Carrying out an approved purge plan on one host: runs there (in a pinned Ray task), no Ray here.

The order closes the window in which a swap (an adapter's weights, or adapter/ itself, replaced by
a symlink into checkpoints/) could make a deletion take final weights:
1. every adapter under the root is digested (what the deletion is held to);
2. the root is scanned again (runner.chores.scan): only a run still removable, approved, and
   whose checkpoints/ listing is still the one the plan showed goes;
3. right before its rename, each run is asked again whether it is training (runner.chores.activity);
   then its checkpoints/ is renamed aside, atomically, into a fresh private folder of its own run
   (`.labprobe-purging-<hex>/checkpoints`): from then on any link into checkpoints/ dangles, and
   nothing can move into the tree by its old path; a listing that changed between the check and
   the rename puts it back;
4. every adapter is digested again: if any differs from (1), every tree set aside is put back and
   nothing is deleted;
5. the trees set aside are deleted (a `.deleting` mark in the folder first) through fds that never
   follow a link nor enter a mount, iteratively (any depth);
6. every adapter is digested a last time: each row says whether its adapter is verified.
Any error on the way (any exception, Ctrl-C) puts back whatever is still set aside, what remains of
a tree whose deletion stopped included; a put-back never replaces a checkpoints/ made meanwhile
(renameat2 RENAME_NOREPLACE; the entries are merged into it instead). A purge killed (SIGKILL)
between 3 and 5 leaves the folder set aside: `recover` (`labprobe purge --recover`) puts it back,
or finishes a deletion its mark says had begun.
"""

from __future__ import annotations

import dataclasses
import os
import secrets

from runner.chores import activity
from runner.chores.fstree import (
    DIR_FLAGS,
    UNVERIFIABLE,
    is_inside,
    readable,
    remove_tree,
    rename_noreplace,
    tree_digests,
    walk_tree,
)
from runner.chores.mounts import sync_filesystem
from runner.chores.putback import DELETING, move_back
from runner.chores.scan import (
    ADAPTER,
    ASIDE_PREFIX,
    CHECKPOINTS,
    ActionRow,
    resolve_root,
    scan_root,
)

Digests = dict[str, "dict[str, str] | None"]


class Refused(Exception):
    """A run found unsafe at the last moment: refused, nothing of it touched."""


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
    root = os.path.realpath(os.path.dirname(run_path))
    try:
        outside = os.path.islink(adapter) and os.path.isdir(adapter) and not is_inside(os.path.realpath(adapter), root)
    except OSError as exc:  # swapped between realpath's lstat and its readlink (EINVAL): unverifiable, never a crash
        return {"": f"{UNVERIFIABLE}adapter/ changed while it was read ({exc.strerror or exc})"}
    if outside:
        # Not walked: `adapter -> /` would hash the machine. Such a run is refused (scan's adapter checks);
        # its link text is its digest, so the link moved or left dangling shows. A link within the runs
        # root is walked as before: its bytes are what another run's checkpoints/ may hold.
        try:
            text = readable(os.readlink(adapter))
        except OSError as exc:  # replaced meanwhile: unverifiable all the same, never a crash
            text = f"unreadable: {exc.strerror or exc}"
        return {"": f"{UNVERIFIABLE}adapter/ is a symlink to a directory (-> {text})"}
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


def execute(
    runs_root: str, run_glob: str, planned: dict[str, str] | list[str], host: str = "", quiet_s: float = 0.0
) -> Executed:
    """Delete the planned `checkpoints/` (`planned`: the plan's readable paths, as the operator
    saw them, each with the listing fingerprint shown, or a list of paths) and report: a run
    refused now, or whose checkpoints/ changed since the plan, is left alone; a run removable
    now but not in the plan is left alone (it was not approved)."""
    root = resolve_root(runs_root)
    shown = dict.fromkeys(planned, "") if isinstance(planned, list) else dict(planned)
    before = all_digests(root)
    rows = scan_root(root, run_glob, host, quiet_s)
    for row in rows:
        if row.path in shown and row.action == "remove" and shown[row.path] not in ("", row.listing_sha256):
            row.action, row.reason = "refuse", "checkpoints/ changed since the plan was shown: run the dry run again"
    todo = [r for r in rows if r.path in shown and r.action == "remove"]
    avail_before = _avail_by_dev(todo)
    done = {r.path: r for r in _carry_out(root, todo, before, quiet_s)}
    outcome = []
    for row in rows:
        if row.path not in shown:
            reason = row.reason or "not in the plan that was shown (appeared since): left alone"
            outcome.append(dataclasses.replace(row, action="refuse", reason=reason))
        elif row.action != "remove":
            outcome.append(dataclasses.replace(row, reason=f"at deletion: {row.reason}"))
        else:
            outcome.append(done[row.path])
    outcome += [_gone_row(host, p) for p in sorted(set(shown) - {r.path for r in rows})]
    outcome += _verify(root, host, outcome, before)
    return Executed(actions=outcome, avail_before=avail_before, avail_after=_avail_by_dev(todo))


def _gone_row(host: str, path: str) -> ActionRow:
    return ActionRow(
        host=host,
        run=os.path.basename(os.path.dirname(path)),
        path=path,
        bytes=0,
        alloc_bytes=0,
        num_files=0,
        action="refuse",
        reason="at deletion: no longer found",
    )


@dataclasses.dataclass
class _Aside:
    row: ActionRow
    run: str
    """The run directory's name as os functions take it."""
    holder: str
    """The private folder holding its checkpoints/ now."""


def _carry_out(root: str, todo: list[ActionRow], before: Digests, quiet_s: float) -> list[ActionRow]:
    """Steps 3 to 5 for the runs to delete; one row back for each. Whatever goes wrong, nothing
    stays set aside: an error deleting one tree puts its remains back (`_delete_aside`), and any
    exception escaping here (Ctrl-C included) first puts back every tree still aside."""
    root_fd = os.open(root, DIR_FLAGS)
    asides: list[_Aside] = []
    try:
        results = [_aside_or_row(root_fd, row, quiet_s, asides) if _owned(root, row) else _outside(row) for row in todo]
        results = [r for r in results if r is not None]
        changed = changed_adapters(before, all_digests(root))
        if changed:
            why = (
                f"at deletion: the final adapter of {readable(', '.join(changed[:3]))} changed while "
                "checkpoints/ were set aside: every checkpoints/ put back, nothing removed"
            )
            results += _put_back_all(root_fd, asides, why)
            asides.clear()
            return results
        while asides:
            results.append(_delete_aside(root_fd, asides[0]))
            asides.pop(0)
        return results
    except BaseException:
        _put_back_all(root_fd, asides, "")
        raise
    finally:
        os.close(root_fd)


def _owned(root: str, row: ActionRow) -> bool:
    """Whether the row's checkpoints/ is, by its real path, a run's folder directly under the runs
    root: the only place a purge deletes (the scan found it there; this says it again, by path)."""
    real = os.path.realpath(row.real_path)
    return real == row.real_path and os.path.dirname(os.path.dirname(real)) == os.path.realpath(root)


def _outside(row: ActionRow) -> ActionRow:
    why = f"at deletion: checkpoints/ resolves to {readable(os.path.realpath(row.real_path))}, not a run under the runs root"
    return dataclasses.replace(row, action="refuse", reason=why)


def _aside_or_row(root_fd: int, row: ActionRow, quiet_s: float, asides: list[_Aside]) -> ActionRow | None:
    """Set the run's checkpoints/ aside (appended to `asides`, None back), or the row saying why not."""
    try:
        asides.append(_set_aside(root_fd, row, quiet_s))
        return None
    except Refused as exc:
        return dataclasses.replace(row, action="refuse", reason=readable(f"at deletion: {exc}"))
    except OSError as exc:
        return dataclasses.replace(
            row, action="failed", reason=f"could not set checkpoints/ aside ({_why(exc)}): nothing removed"
        )


def _set_aside(root_fd: int, row: ActionRow, quiet_s: float) -> _Aside:
    """Ask again whether the run is training, rename its checkpoints/ into a fresh private folder
    of the run (same directory tree, one filesystem: atomic), then check it is the directory the
    scan approved, holding what the scan listed (a writer's checkpoint-N added between the check
    and the rename would be lost with it: put back instead)."""
    run = os.path.basename(os.path.dirname(row.real_path))
    training = activity.training_reasons(os.path.dirname(row.real_path), quiet_s)
    if training:
        raise Refused("; ".join(training))
    run_fd = os.open(run, DIR_FLAGS, dir_fd=root_fd)
    try:
        holder = ASIDE_PREFIX + secrets.token_hex(6)
        os.mkdir(holder, 0o700, dir_fd=run_fd)
        moved = os.path.join(holder, CHECKPOINTS)
        try:
            rename_noreplace(CHECKPOINTS, moved, run_fd, run_fd)
        except OSError:
            os.rmdir(holder, dir_fd=run_fd)
            raise
        st = os.stat(moved, dir_fd=run_fd, follow_symlinks=False)
        if (st.st_dev, st.st_ino) != (row.dev, row.ino):
            _back_or_explain(run_fd, holder, "checkpoints/ was replaced since it was checked")
            raise OSError("checkpoints/ was replaced since it was checked")
        # A file opened before the rename is still written through its fd: asked first, then the
        # listing (a write finished before this question shows in it).
        aside_path = os.path.join(os.path.dirname(row.real_path), moved)
        open_now = activity.users([aside_path]).get(aside_path, [])
        if open_now or walk_tree(aside_path, CHECKPOINTS).fingerprint() != row.listing_sha256:
            _back_or_explain(run_fd, holder, "checkpoints/ changed between the last check and the rename")
            why = f"in use: {open_now[0]}" if open_now else "changed between the last check and the rename"
            raise Refused(f"training: checkpoints/ {why}: put back")
    finally:
        os.close(run_fd)
    return _Aside(row=row, run=run, holder=holder)


def _back_or_explain(run_fd: int, holder: str, what: str) -> None:
    try:
        move_back(run_fd, holder)
    except OSError as exc:
        raise OSError(
            f"{what}, and could not be put back ({exc.strerror or exc}): it is in {readable(holder)}"
        ) from exc


def _put_back_all(root_fd: int, asides: list[_Aside], why: str) -> list[ActionRow]:
    rows = []
    for aside in asides:
        try:
            run_fd = os.open(aside.run, DIR_FLAGS, dir_fd=root_fd)
            try:
                move_back(run_fd, aside.holder)
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
    """Mark the folder as being deleted, delete the tree, drop the folder. Any error (whatever
    exception) puts what remains back as checkpoints/: the run is never left set aside."""
    try:
        run_fd = os.open(aside.run, DIR_FLAGS, dir_fd=root_fd)
    except OSError as exc:
        return _failed(aside, exc, "")
    try:
        holder_fd = os.open(aside.holder, DIR_FLAGS, dir_fd=run_fd)
        try:
            os.close(os.open(DELETING, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600, dir_fd=holder_fd))
            remove_tree(CHECKPOINTS, holder_fd, (aside.row.dev, aside.row.ino))
            os.unlink(DELETING, dir_fd=holder_fd)
        finally:
            os.close(holder_fd)
        os.rmdir(aside.holder, dir_fd=run_fd)
    except Exception as exc:  # RecursionError, MemoryError as much as OSError: put back, then say
        return _failed(aside, exc, _put_remains_back(run_fd, aside.holder))
    finally:
        os.close(run_fd)
    return dataclasses.replace(aside.row, action="removed")


def _put_remains_back(run_fd: int, holder: str) -> str:
    """What became of a tree whose deletion stopped, in words."""
    try:
        move_back(run_fd, holder)
    except OSError as exc:
        return f"; what remains could not be put back ({_why(exc)}): it is in {readable(holder)}"
    return "; what remained was put back as checkpoints/"


def _failed(aside: _Aside, exc: BaseException, then: str) -> ActionRow:
    why = _why(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
    return dataclasses.replace(aside.row, action="failed", reason=readable(f"removal stopped ({why}){then}"))


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
