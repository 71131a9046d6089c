"""The filesystem side of `labprobe purge`: runs on each host (in a pinned Ray task), no Ray here.

A run is a directory directly under the host's runs root holding an intermediate `checkpoints/`
and a final `adapter/`. `scan_root` plans: each `checkpoints/` to remove, or the run refused with
its reasons. `execute` deletes: adapters' sha256 first, every planned `checkpoints/` re-checked at
the moment of deletion and removed by a walk that never follows a symlink nor crosses into another
filesystem, the sha256 again, and the space available on each filesystem before and after.
Nothing but `checkpoints/` directories is ever touched. The no-follow walk, removal and digests
themselves are runner/chores/fstree.py; this module decides what they may touch.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import stat

from probes.result import InputError
from runner.chores.fstree import (
    DIR_FLAGS,
    Tree,
    is_inside,
    remove_tree,
    tree_digests,
    walk_tree,
)

ADAPTER = "adapter"
CHECKPOINTS = "checkpoints"
_MAX_LISTED = 3  # offending paths named per reason; the rest are counted


@dataclasses.dataclass(kw_only=True)
class ActionRow:
    """One run's `checkpoints/` in a plan (remove|refuse) or an outcome (removed|refuse|failed)."""

    host: str
    run: str
    path: str
    bytes: int
    """Apparent size of the distinct files under checkpoints/ (hard links counted once)."""
    alloc_bytes: int
    """Blocks allocated to them (st_blocks * 512): what deleting can give back at most."""
    num_files: int
    action: str
    reason: str = ""
    num_adapter_files: int = 0
    adapter_digests_verified: bool | None = None
    """With --yes: every adapter file's sha256 equal before and after the purge. None in a plan."""
    fs: str = ""
    """The filesystem: "major:minor" of st_dev (joins purge.filesystems)."""
    phase: str = "plan"
    dev: int = dataclasses.field(default=0, repr=False)
    ino: int = dataclasses.field(default=0, repr=False)


def _listed(items: list[str]) -> str:
    shown = ", ".join(sorted(items)[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return f"{shown} (+{more} more)" if more > 0 else shown


def _symlink_reason(what: str, link: str, root: str, checkpoints: str) -> str:
    target = os.path.realpath(link)
    parts = os.path.relpath(target, root).split(os.sep)
    if is_inside(target, checkpoints):
        where = "into checkpoints/"
    elif not is_inside(target, root):
        where = "resolving outside the runs root"
    elif len(parts) > 1 and parts[1] == CHECKPOINTS:
        where = f"into another run's checkpoints/ ({parts[0]})"
    else:
        where = "(never followed)"
    return f"{what} is a symlink {where} (-> {os.readlink(link)})"


def resolve_root(runs_root: str) -> str:
    """The runs root as a real absolute path; a missing or non-directory root is bad input."""
    if not os.path.isdir(runs_root):
        raise InputError(f"runs root {runs_root} does not exist or is not a directory")
    return os.path.realpath(runs_root)


@dataclasses.dataclass
class Anchors:
    """What every run's final adapter rests on, so one run's purge cannot take another's adapter."""

    targets: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(resolved target, "run/adapter/...") of each adapter that is, or holds, a symlink."""
    inodes: dict[tuple[int, int], str] = dataclasses.field(default_factory=dict)
    """(st_dev, st_ino) -> "run/adapter/file" of every adapter file."""


def adapter_anchors(root: str) -> Anchors:
    """Every run's adapter under the root (whatever --run selects: a purged run's checkpoints/ may
    hold an unselected run's adapter). Read-only, so a symlinked run directory is read through."""
    anchors = Anchors()
    for name in sorted(os.listdir(root)):
        adapter = os.path.join(root, name, ADAPTER)
        if os.path.islink(adapter):
            anchors.targets.append((os.path.realpath(adapter), f"{name}/{ADAPTER}"))
        elif os.path.isdir(adapter):
            tree = walk_tree(adapter, f"{name}/{ADAPTER}")
            anchors.targets += [(os.path.realpath(os.path.join(root, rel)), rel)
                                for rel, _ in tree.symlinks]
            anchors.inodes.update({key: rel for key, rel in tree.files.items()})
    return anchors


def _others_reasons(run: str, ckpt: str, tree: Tree, anchors: Anchors) -> list[str]:
    """Other runs' adapters that rest on this run's checkpoints/ (through a link or an inode)."""
    mine = f"{run}/"
    real = os.path.realpath(ckpt)
    linked = [f"{label} -> {target}" for target, label in anchors.targets
              if not label.startswith(mine) and is_inside(target, real)]
    shared = [f"{anchors.inodes[key]} shares an inode with {rel}" for key, rel in tree.files.items()
              if not anchors.inodes.get(key, mine).startswith(mine)]
    reasons = [f"checkpoints/ holds another run's final adapter: {_listed(linked)}"] if linked else []
    if shared:
        reasons.append(f"hard link with another run's final adapter: {_listed(shared)}")
    return reasons


def scan_run(root: str, run: str, host: str = "", anchors: Anchors | None = None) -> ActionRow | None:
    """Plan one run: remove its checkpoints/, or refuse with every reason found. None when the
    entry is not a run with a checkpoints/ (nothing to purge)."""
    run_path = os.path.join(root, run)
    ckpt = os.path.join(run_path, CHECKPOINTS)
    row = ActionRow(host=host, run=run, path=ckpt, bytes=0, alloc_bytes=0, num_files=0,
                    action="remove")
    try:
        run_st = os.lstat(run_path)
    except FileNotFoundError:  # gone since the listing
        return None
    if stat.S_ISLNK(run_st.st_mode):
        if not os.path.isdir(os.path.join(run_path, CHECKPOINTS)):
            return None
        return _settle(row, [_symlink_reason("run directory", run_path, root, ckpt)], run_st)
    if not stat.S_ISDIR(run_st.st_mode):
        return None
    try:
        ckpt_st = os.lstat(ckpt)
    except FileNotFoundError:
        return None
    reasons: list[str] = []
    if stat.S_ISLNK(ckpt_st.st_mode):
        return _settle(row, [_symlink_reason("checkpoints/", ckpt, root, ckpt)], ckpt_st)
    if not stat.S_ISDIR(ckpt_st.st_mode):
        return _settle(row, ["checkpoints is not a directory"], ckpt_st)
    if ckpt_st.st_dev != run_st.st_dev:
        reasons.append("checkpoints/ is another filesystem's mount point")
    if not is_inside(os.path.realpath(ckpt), root):
        reasons.append("checkpoints/ resolves outside the runs root")
    tree = walk_tree(ckpt, CHECKPOINTS)
    row.bytes, row.alloc_bytes, row.num_files = tree.bytes, tree.alloc_bytes, tree.num_files
    if tree.symlinks:
        links = [f"{rel} -> {target}" for rel, target in tree.symlinks]
        reasons.append(f"symlink inside checkpoints/ (never followed): {_listed(links)}")
    if tree.mounts:
        reasons.append(f"another filesystem mounted inside checkpoints/: {_listed(tree.mounts)}")
    reasons += tree.errors[:_MAX_LISTED]
    reasons += _resting_on_checkpoints(run_path, ckpt, tree)
    adapter_reasons, row.num_adapter_files = _adapter_reasons(root, run_path, ckpt, tree)
    reasons += _others_reasons(run, ckpt, tree, anchors or adapter_anchors(root))
    return _settle(row, reasons + adapter_reasons, ckpt_st)


def _resting_on_checkpoints(run_path: str, ckpt: str, ckpt_tree: Tree) -> list[str]:
    """Whatever else in the run rests on checkpoints/ (a merged/ model symlinked or hard-linked to
    a checkpoint's files, a `latest` link beside it): removing checkpoints/ would break it. The
    adapter has its own checks (_adapter_reasons); this covers every other entry of the run."""
    real = os.path.realpath(ckpt)
    links: list[str] = []
    shared: list[str] = []
    errors: list[str] = []
    try:
        with os.scandir(run_path) as entries:
            found = sorted(entries, key=lambda e: e.name)
    except OSError as exc:
        return [f"cannot list the run: {exc.strerror}"]
    for entry in found:
        if entry.name in (CHECKPOINTS, ADAPTER):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError as exc:
            errors.append(f"cannot stat {entry.name}: {exc.strerror}")
            continue
        if stat.S_ISLNK(st.st_mode):
            tree = Tree(symlinks=[(entry.name, os.readlink(entry.path))])
        elif stat.S_ISDIR(st.st_mode):
            tree = walk_tree(entry.path, entry.name)
        else:
            tree = Tree(files={(st.st_dev, st.st_ino): entry.name})
        errors += tree.errors
        links += [f"{rel} -> {text}" for rel, text in tree.symlinks
                  if is_inside(os.path.realpath(os.path.join(run_path, rel)), real)]
        shared += [f"{rel} shares an inode with {ckpt_tree.files[key]}"
                   for key, rel in tree.files.items() if key in ckpt_tree.files]
    reasons = [f"symlink into checkpoints/ outside it: {_listed(links)}"] if links else []
    if shared:
        reasons.append(f"hard link between checkpoints/ and the rest of the run: {_listed(shared)}")
    # Unreadable parts of the run cannot be shown not to rest on checkpoints/: refuse.
    return reasons + errors[:_MAX_LISTED]


def _adapter_reasons(root: str, run_path: str, ckpt: str, ckpt_tree: Tree) -> tuple[list[str], int]:
    """Why the final adapter does not stand on its own (empty when it does), and its file count."""
    adapter = os.path.join(run_path, ADAPTER)
    try:
        st = os.lstat(adapter)
    except FileNotFoundError:
        return ["final adapter missing (no adapter/)"], 0
    if stat.S_ISLNK(st.st_mode):
        return [_symlink_reason("final adapter", adapter, root, ckpt)], 0
    if not stat.S_ISDIR(st.st_mode):
        return ["final adapter is not a directory"], 0
    tree = walk_tree(adapter, ADAPTER)
    reasons = list(tree.errors[:_MAX_LISTED])
    if not is_inside(os.path.realpath(adapter), root):
        reasons.append("final adapter resolves outside the runs root")
    if (st.st_dev, st.st_ino) in ckpt_tree.dirs:
        reasons.append("final adapter is the same directory as one under checkpoints/ (bind mount)")
    if tree.num_files == 0:
        reasons.append("final adapter has no files")
    # An adapter must be real files: a symlink in it could lead into checkpoints/ or anywhere.
    links = [_symlink_reason(rel, os.path.join(run_path, rel), root, ckpt)
             for rel, _ in tree.symlinks]
    if links:
        reasons.append(_listed(links))
    shared = [f"{rel} shares an inode with {ckpt_tree.files[key]}"
              for key, rel in tree.files.items() if key in ckpt_tree.files]
    if shared:
        reasons.append(f"hard link between adapter and checkpoints: {_listed(shared)}")
    if tree.mounts:
        reasons.append(f"another filesystem mounted inside adapter/: {_listed(tree.mounts)}")
    return reasons, tree.num_files


def _settle(row: ActionRow, reasons: list[str], st: os.stat_result) -> ActionRow:
    """Stamp the directory's identity (checked again at deletion) and refuse if any reason."""
    row.dev, row.ino = st.st_dev, st.st_ino
    row.fs = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if reasons:
        row.action, row.reason = "refuse", "; ".join(reasons)
    return row


def scan_root(runs_root: str, run_glob: str = "*", host: str = "") -> list[ActionRow]:
    """The plan for every run under the runs root whose name matches `run_glob`."""
    root = resolve_root(runs_root)
    anchors = adapter_anchors(root)
    rows = []
    for name in sorted(os.listdir(root)):
        if fnmatch.fnmatchcase(name, run_glob):
            row = scan_run(root, name, host, anchors)
            if row is not None:
                rows.append(row)
    return rows


def adapter_digests(run_path: str) -> dict[str, str] | None:
    """sha256 of every file of the run's adapter (relative path -> hex, links followed: see
    fstree.tree_digests); None when there is no adapter directory."""
    adapter = os.path.join(run_path, ADAPTER)
    return tree_digests(adapter) if os.path.isdir(adapter) else None


# -- deleting -----------------------------------------------------------------------------------

@dataclasses.dataclass
class Executed:
    actions: list[ActionRow]
    avail_before: dict[int, int]
    """st_dev -> bytes available to users there before the first deletion, and after the last."""
    avail_after: dict[int, int]


def execute(runs_root: str, run_glob: str, planned: list[str], host: str = "") -> Executed:
    """Delete the planned `checkpoints/` (paths from the plan the operator saw) and report.

    Adapters are digested before anything is deleted and again after; a run is re-scanned right
    before its deletion and refused then if anything changed for the worse; a run that became
    removable since the plan was shown is left alone (it was not approved).
    """
    root = resolve_root(runs_root)
    rows = scan_root(root, run_glob, host)
    approved = set(planned)
    # Every adapter under the root, not only the selected runs': one run's checkpoints/ could be
    # what another run's adapter rests on (refused above, verified here all the same).
    digests = {name: adapter_digests(os.path.join(root, name)) for name in sorted(os.listdir(root))}
    todo = [r for r in rows if r.path in approved and r.action == "remove"]
    avail_before = _avail_by_dev(root, todo)
    outcome = []
    root_fd = os.open(root, DIR_FLAGS)
    try:
        for row in rows:
            if row.path not in approved:
                reason = row.reason or "not in the plan that was shown (appeared since): left alone"
                outcome.append(dataclasses.replace(row, action="refuse", reason=reason))
            elif row.action != "remove":
                outcome.append(dataclasses.replace(row, reason=f"at deletion: {row.reason}"))
            else:
                outcome.append(_delete_checked(root, root_fd, row))
    finally:
        os.close(root_fd)
    gone = approved - {r.path for r in rows}
    outcome += [ActionRow(host=host, run=os.path.basename(os.path.dirname(p)), path=p, bytes=0,
                          alloc_bytes=0, num_files=0, action="refuse",
                          reason="at deletion: no longer found") for p in sorted(gone)]
    outcome += _verify(root, host, outcome, digests)
    return Executed(actions=outcome, avail_before=avail_before,
                    avail_after=_avail_by_dev(root, todo))


def _verify(root: str, host: str, outcome: list[ActionRow],
            digests: dict[str, dict[str, str] | None]) -> list[ActionRow]:
    """Digest every adapter again: the verdict goes on each selected run's row; an unselected run
    whose adapter changed gets a `failed` row of its own."""
    after = {name: adapter_digests(os.path.join(root, name)) for name in digests}
    for row in outcome:
        row.phase = "outcome"
        if digests.get(row.run) is not None:
            row.adapter_digests_verified = after.get(row.run) == digests[row.run]
    selected = {r.run for r in outcome}
    return [ActionRow(host=host, run=name, path=os.path.join(root, name, ADAPTER), bytes=0,
                      alloc_bytes=0, num_files=0, action="failed", phase="outcome",
                      reason="the final adapter of a run not selected changed during the purge",
                      adapter_digests_verified=False)
            for name in digests if name not in selected and digests[name] != after[name]]


def _delete_checked(root: str, root_fd: int, row: ActionRow) -> ActionRow:
    """Re-check one run at the moment of deletion, then remove its checkpoints/ through fds."""
    again = scan_run(root, row.run, row.host)
    if again is None or again.action != "remove":
        why = again.reason if again else "checkpoints/ no longer found"
        return dataclasses.replace(row, action="refuse", reason=f"at deletion: {why}")
    try:
        run_fd = os.open(row.run, DIR_FLAGS, dir_fd=root_fd)
        try:
            remove_tree(CHECKPOINTS, run_fd, (again.dev, again.ino))
        finally:
            os.close(run_fd)
    except OSError as exc:
        detail = exc.strerror and f"{exc.strerror}: {exc.filename}" or str(exc)
        return dataclasses.replace(again, action="failed",
                                   reason=f"removal stopped ({detail}); checkpoints/ may be partly removed")
    return dataclasses.replace(again, action="removed")


def _avail_by_dev(root: str, rows: list[ActionRow]) -> dict[int, int]:
    """Bytes available to users on each filesystem holding one of `rows`, measured now."""
    os.sync()  # flush pending frees so the figure is the filesystem's, not the page cache's
    paths = {r.dev: os.path.join(root, r.run) for r in rows}
    out = {}
    for dev, path in paths.items():
        vfs = os.statvfs(path)
        out[dev] = vfs.f_bavail * vfs.f_frsize
    return out
