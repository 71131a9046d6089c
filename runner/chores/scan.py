"""A host's runs root read into a purge plan: each run's `checkpoints/` to remove, or the run
refused with every reason found. Runs on the host (in a pinned Ray task); deletes nothing.

A run is a directory directly under the runs root holding an intermediate `checkpoints/` and a
final `adapter/`. The checkpoints/ of a run may go only when nothing would lose what it holds:
- its final adapter stands on its own: a real directory of regular files (no symlink, FIFO,
  socket or device, no mount point), holding weights whose header parses (runner.chores.weights),
  sharing no inode with checkpoints/;
- no symlink anywhere under the runs root (in any run: adapter/, merged/, checkpoints/ or
  elsewhere) resolves into it, through it, or to a folder holding it; no file elsewhere under
  the root shares an inode with one in it;
- no mount point lies at or under it (read from the mount table: a bind mount of the same
  filesystem shares st_dev), and no folder of it is mounted elsewhere under the root;
- it and its run are real directories inside the runs root, readable throughout;
- the run is not training: nothing under it changed within the host's `runs_quiet_min`, and no
  process uses a file under it (open, mapped or its working directory: runner.chores.activity);
- the final adapter is not older than any checkpoint, and no adapter or merged config under the root
  names a base inside `checkpoints/`.
Names are carried as the os functions give them (undecodable bytes surrogate-escaped) and shown
in `ActionRow`'s text fields as `fstree.readable` writes them.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import stat

from probes.result import InputError, loads
from runner.chores import activity
from runner.chores.fstree import READ_FLAGS, Tree, is_inside, link_trail, readable, walk_tree
from runner.chores.mounts import mount_points_under, read_mounts
from runner.chores.weights import weights_reasons

ADAPTER = "adapter"
CHECKPOINTS = "checkpoints"
ASIDE_PREFIX = ".labprobe-purging-"
"""A run's folder holding its checkpoints/ between the rename aside and the deletion."""
_MAX_LISTED = 3  # offending paths named per reason; the rest are counted


@dataclasses.dataclass(kw_only=True)
class ActionRow:
    """One run's `checkpoints/` in a plan (remove|refuse) or an outcome (removed|refuse|failed)."""

    host: str
    run: str
    """The run directory's name, readable (fstree.readable)."""
    path: str
    """checkpoints/, readable: the plan's approval names it so."""
    bytes: int
    """Apparent size of the distinct files under checkpoints/ (hard links counted once)."""
    alloc_bytes: int
    """Blocks allocated to them (st_blocks * 512): what deleting can give back at most."""
    num_files: int
    action: str
    reason: str = ""
    num_adapter_files: int = 0
    adapter_digests_verified: bool | None = None
    """With --yes: every adapter file read, its sha256 equal before and after the purge (True);
    changed or lost (False); None in a plan, without an adapter, or when something could not be read."""
    fs: str = ""
    """The filesystem: "major:minor" of st_dev (joins purge.filesystems)."""
    phase: str = "plan"
    listing_sha256: str = ""
    """sha256 of checkpoints/' listing (every entry's path, kind, size, mtime): a `--yes` deletes a
    run only while this is what the plan showed."""
    dev: int = dataclasses.field(default=0, repr=False)
    ino: int = dataclasses.field(default=0, repr=False)
    real_path: str = dataclasses.field(default="", repr=False)
    """checkpoints/ as os functions take it; stays on the host (`public` leaves it out)."""


def public(row: ActionRow) -> dict:
    """The row as the driver gets it: printable text only."""
    return {k: v for k, v in dataclasses.asdict(row).items() if k != "real_path"}


def _listed(items: list[str]) -> str:
    shown = ", ".join(sorted(items)[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return f"{shown} (+{more} more)" if more > 0 else shown


def reaches(trail: list[str], folder: str) -> bool:
    """Does a link whose resolution passes `trail` lead into `folder`, through it, or to a
    folder holding it?"""
    return any(is_inside(p, folder) for p in trail) or is_inside(folder, trail[-1])


def _symlink_reason(what: str, link: str, root: str, checkpoints: str) -> str:
    try:
        text, trail = os.readlink(link), link_trail(link)
    except OSError as exc:
        return f"{what} changed while it was read ({exc.strerror})"
    parts = os.path.relpath(trail[-1], root).split(os.sep)
    if reaches(trail, os.path.abspath(checkpoints)):
        where = "into checkpoints/"
    elif not is_inside(trail[-1], root):
        where = "resolving outside the runs root"
    elif len(parts) > 1 and parts[1] == CHECKPOINTS:
        where = f"into another run's checkpoints/ ({parts[0]})"
    else:
        where = "(never followed)"
    return f"{what} is a symlink {where} (-> {text})"


def resolve_root(runs_root: str) -> str:
    """The runs root as a real absolute path; a missing or non-directory root is bad input."""
    if not os.path.isdir(runs_root):
        raise InputError(f"runs root {runs_root} does not exist or is not a directory")
    return os.path.realpath(runs_root)


@dataclasses.dataclass
class RootIndex:
    """Everything under the runs root that could rest on a run's checkpoints/."""

    links: list[tuple[str, str, list[str]]]
    """(path from the root, link text, link_trail) of every symlink under the root."""
    shared: dict[tuple[int, int], list[str]]
    """(st_dev, st_ino) -> every name under the root of each file with hard links."""
    mounts: list[str]
    """Mount points at or under the root, from the mount table."""
    mounted_dirs: dict[tuple[int, int], str]
    """(st_dev, st_ino) of the folder shown at each of those mount points -> the mount point."""
    newest_ns: dict[str, int] = dataclasses.field(default_factory=dict)
    """Entry directly under the root -> its newest mtime (ns) at or under it."""
    users: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    """Run path -> the processes using a file under it (runner.chores.activity.users)."""
    bases: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    """(config's path from the root, the base it names, that base's real path) of every adapter or merged
    model config under a run naming a local base: an adapter trained on a checkpoint loads on top of it."""
    quiet_s: float = 0.0


def index_root(root: str) -> RootIndex:
    """One no-follow walk of the whole runs root (every run, whatever --run selects), and of each
    run the root links to (reached as a run, its links count as under the root; other links to
    folders, a `datasets -> /data` say, are not walked)."""
    trees = [("", walk_tree(root, ".", index_only=True))]
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.islink(path) and any(os.path.isdir(os.path.join(path, d)) for d in (CHECKPOINTS, ADAPTER)):
            trees.append((name, walk_tree(os.path.realpath(path), "./" + name, index_only=True)))
    links, shared = [], {}
    for name, tree in trees:
        real = os.path.realpath(os.path.join(root, name))
        for rel, text in tree.symlinks:
            label = rel[2:]  # "./run/x" -> "run/x"
            try:
                links.append((label, text, link_trail(os.path.join(real, os.path.relpath(label, name or ".")))))
            except OSError:  # replaced since the walk: as if made after the scan (see deletion.py)
                continue
        for key, names in tree.shared.items():
            shared.setdefault(key, []).extend(n[2:] for n in names)
    mounts = [m for m in mount_points_under(root, read_mounts()) if m != root]
    mounted = {}
    for point in mounts:
        try:
            st = os.stat(point)
        except OSError:
            continue
        mounted[(st.st_dev, st.st_ino)] = point
    runs = [os.path.join(root, name) for name in trees[0][1].newest_ns]
    return RootIndex(
        links=links,
        shared=shared,
        mounts=mounts,
        mounted_dirs=mounted,
        newest_ns=trees[0][1].newest_ns,
        users=activity.users(runs),
        bases=[b for run in runs for b in _named_bases(root, run)],
    )


_BASE_KEYS = ("base_model_name_or_path", "_name_or_path")
_MAX_CONFIG_BYTES = 1 << 20


def _named_bases(root: str, run: str) -> list[tuple[str, str, str]]:
    """The local bases the run's adapter and merged configs name (PEFT's `base_model_name_or_path`,
    transformers' `_name_or_path`), each as it resolves from the config's folder, the run and the root
    (a loader resolves a relative one from its own working directory: any of them may be it)."""
    out = []
    for top in (ADAPTER, "merged"):
        if os.path.islink(os.path.join(run, top)):  # walked, a link to `/` would walk the machine (refused anyway)
            continue
        for folder, dirs, files in os.walk(os.path.join(run, top), followlinks=False):
            dirs.sort()
            for name in sorted(n for n in files if n in ("adapter_config.json", "config.json")):
                text = _config_text(os.path.join(folder, name))
                for base in (text.get(k) for k in _BASE_KEYS if isinstance(text.get(k), str)):
                    label = os.path.relpath(os.path.join(folder, name), root)
                    for start in (folder, run, root):
                        out.append((label, base, os.path.realpath(os.path.join(start, os.path.expanduser(base)))))
    return out


def _config_text(path: str) -> dict:
    """A config's JSON object, or {} when it is not one (its loadability is weights.py's to judge). Read as
    weights.py reads: never through a link, never blocking on a FIFO, only a regular file, and no more
    than _MAX_CONFIG_BYTES (a `config.json -> /dev/zero` would never end)."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError:
        return {}
    with os.fdopen(fd, "rb") as handle:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return {}
            data = handle.read(_MAX_CONFIG_BYTES + 1)
            found = loads(data.decode("utf-8")) if len(data) <= _MAX_CONFIG_BYTES else {}
        except (OSError, ValueError):
            return {}
    return found if isinstance(found, dict) else {}


def scan_run(root: str, name: str, host: str, index: RootIndex) -> ActionRow | None:
    """Plan one run: remove its checkpoints/, or refuse with every reason found. None when the
    entry is not a run with a checkpoints/ (nothing to purge)."""
    run_path = os.path.join(root, name)
    ckpt = os.path.join(run_path, CHECKPOINTS)
    row = ActionRow(
        host=host,
        run=readable(name),
        path=readable(ckpt),
        bytes=0,
        alloc_bytes=0,
        num_files=0,
        action="remove",
        real_path=ckpt,
    )
    try:
        run_st = os.lstat(run_path)
    except FileNotFoundError:  # gone since the listing
        return None
    if stat.S_ISLNK(run_st.st_mode):
        if not os.path.isdir(ckpt):
            return None
        return _settle(row, [_symlink_reason("run directory", run_path, root, ckpt)], run_st)
    if not stat.S_ISDIR(run_st.st_mode):
        return None
    try:
        asides = sorted(e for e in os.listdir(run_path) if e.startswith(ASIDE_PREFIX))
        ckpt_st = os.lstat(ckpt)
    except FileNotFoundError:
        return _settle(row, [_aside_reason(asides)], run_st) if asides else None
    except OSError as exc:
        return _settle(row, [f"cannot list the run: {exc.strerror}"], run_st)
    reasons = [_aside_reason(asides)] if asides else []
    if stat.S_ISLNK(ckpt_st.st_mode):
        return _settle(row, [_symlink_reason("checkpoints/", ckpt, root, ckpt)], ckpt_st)
    if not stat.S_ISDIR(ckpt_st.st_mode):
        return _settle(row, ["checkpoints is not a directory"], ckpt_st)
    tree = walk_tree(ckpt, CHECKPOINTS)
    row.bytes, row.alloc_bytes, row.num_files = tree.bytes, tree.alloc_bytes, tree.num_files
    row.listing_sha256 = tree.fingerprint()
    reasons += _training_reasons(run_path, name, index)
    reasons += _checkpoints_reasons(root, ckpt, run_st, ckpt_st, tree, index)
    reasons += _resting_on(name, ckpt, tree, index)
    adapter_reasons, row.num_adapter_files = _adapter_reasons(root, run_path, ckpt, tree, index)
    return _settle(row, reasons + adapter_reasons, ckpt_st)


def _aside_reason(asides: list[str]) -> str:
    return (
        f"an interrupted purge left {_listed(asides)} (holding checkpoints/ set aside): "
        "`labprobe purge --recover` finishes or undoes it"
    )


def _training_reasons(run_path: str, name: str, index: RootIndex) -> list[str]:
    quiet = activity.quiet_reason(index.newest_ns.get(name, 0), index.quiet_s)
    open_now = index.users.get(run_path, [])
    return ([quiet] if quiet else []) + ([activity.in_use_reason(open_now, _MAX_LISTED)] if open_now else [])


def _checkpoints_reasons(
    root: str, ckpt: str, run_st: os.stat_result, ckpt_st: os.stat_result, tree: Tree, index: RootIndex
) -> list[str]:
    """What is wrong inside checkpoints/ itself: links, mounts, specials, unreadable parts."""
    real = os.path.realpath(ckpt)
    reasons = []
    if ckpt_st.st_dev != run_st.st_dev:
        reasons.append("checkpoints/ is another filesystem's mount point")
    if os.path.dirname(ckpt) in index.mounts:
        reasons.append("the run directory is a mount point (what is mounted lives elsewhere)")
    if not is_inside(real, root):
        reasons.append("checkpoints/ resolves outside the runs root")
    if tree.symlinks:
        links = [f"{rel} -> {target}" for rel, target in tree.symlinks]
        reasons.append(f"symlink inside checkpoints/ (never followed): {_listed(links)}")
    points = _mount_points(tree, index, real, CHECKPOINTS)
    if points:
        reasons.append(f"a mount point inside checkpoints/ (what is mounted lives elsewhere): {_listed(points)}")
    also = [
        f"{index.mounted_dirs[key]}"
        for key in tree.dirs
        if key in index.mounted_dirs and not is_inside(index.mounted_dirs[key], real)
    ]
    if also:
        reasons.append(f"a folder of checkpoints/ is also mounted at {_listed(also)}")
    return reasons + tree.errors[:_MAX_LISTED]


def _mount_points(tree: Tree, index: RootIndex, real: str, label: str) -> list[str]:
    """Mount points inside `real` (shown under `label`): those the walk met, and, since a bind mount of the
    same filesystem has the same st_dev, those only the mount table shows."""
    inside = {
        label + "/" + os.path.relpath(m, real) if m != real else label + "/" for m in index.mounts if is_inside(m, real)
    }
    return sorted(set(tree.mounts) | inside)


def _resting_on(run: str, ckpt: str, tree: Tree, index: RootIndex) -> list[str]:
    """Whatever else under the runs root rests on this checkpoints/: symlinks resolving into,
    through or above it; files sharing an inode with one in it. The run's own adapter has its
    own checks (_adapter_reasons)."""
    real = os.path.realpath(ckpt)
    own = (f"{run}/{CHECKPOINTS}", f"{run}/{ADAPTER}")
    groups: dict[str, list[str]] = {}
    for label, text, trail in index.links:
        if not any(is_inside(label, mine) for mine in own) and reaches(trail, real):
            groups.setdefault(_where(label, run, "symlink"), []).append(f"{_from_run(label, run)} -> {text}")
    for key, names in index.shared.items():
        if key in tree.files:
            for label in names:
                if not any(is_inside(label, mine) for mine in own):
                    groups.setdefault(_where(label, run, "hard link"), []).append(
                        f"{_from_run(label, run)} shares an inode with {tree.files[key]}"
                    )
    for label, base, resolved in index.bases:  # the run's own adapter too: a base under checkpoints/ goes with it
        if is_inside(resolved, real):
            groups.setdefault("an adapter or model config names a base under checkpoints/", []).append(
                f"{label} -> {base}"
            )
    return [f"{what}: {_listed(sorted(set(items)))}" for what, items in groups.items() if items]


def _from_run(label: str, run: str) -> str:
    return label[len(run) + 1 :] if label.startswith(f"{run}/") else label


def _where(label: str, run: str, kind: str) -> str:
    parts = label.split("/")
    if parts[0] == run:
        return (
            "symlink into checkpoints/ outside it"
            if kind == "symlink"
            else "hard link between checkpoints/ and the rest of the run"
        )
    if len(parts) > 1 and parts[1] == ADAPTER:
        return (
            f"another run's final adapter rests on checkpoints/ through a {kind}"
            if kind == "symlink"
            else "hard link with another run's final adapter"
        )
    return f"a {kind} elsewhere under the runs root rests on checkpoints/"


def _adapter_reasons(root: str, run_path: str, ckpt: str, ckpt_tree: Tree, index: RootIndex) -> tuple[list[str], int]:
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
    real = os.path.realpath(adapter)
    if not is_inside(real, root):
        reasons.append("final adapter resolves outside the runs root")
    if (st.st_dev, st.st_ino) in ckpt_tree.dirs:
        reasons.append("final adapter is the same directory as one under checkpoints/ (bind mount)")
    if tree.num_files == 0:
        reasons.append("final adapter has no files")
    # An adapter must be real files: a symlink in it could lead into checkpoints/ or anywhere.
    links = [_symlink_reason(rel, os.path.join(run_path, rel), root, ckpt) for rel, _ in tree.symlinks]
    if links:
        reasons.append(_listed(links))
    if tree.specials:  # a FIFO would block whoever reads it; none is an adapter's file
        reasons.append(f"final adapter holds what is not a regular file: {_listed(tree.specials)}")
    shared = [
        f"{rel} shares an inode with {ckpt_tree.files[key]}"
        for key, rel in tree.files.items()
        if key in ckpt_tree.files
    ]
    if shared:
        reasons.append(f"hard link between adapter and checkpoints: {_listed(shared)}")
    points = _mount_points(tree, index, real, ADAPTER)
    if points:
        reasons.append(f"a mount point inside adapter/: {_listed(points)}")
    newer = sorted(n for n, ns in ckpt_tree.newest_ns.items() if ns > tree.newest())
    if newer:
        reasons.append(
            f"{CHECKPOINTS}/{_listed(newer)} newer than adapter/: the run went on after its final adapter was saved"
        )
    if tree.num_files and not tree.specials:
        reasons += weights_reasons(adapter)
    return reasons, tree.num_files


def _settle(row: ActionRow, reasons: list[str], st: os.stat_result) -> ActionRow:
    """Stamp the directory's identity (checked again at deletion) and refuse if any reason."""
    row.dev, row.ino = st.st_dev, st.st_ino
    row.fs = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    if reasons:
        row.action, row.reason = "refuse", readable("; ".join(reasons))
    return row


def scan_root(runs_root: str, run_glob: str = "*", host: str = "", quiet_s: float = 0.0) -> list[ActionRow]:
    """The plan for every run under the runs root whose name matches `run_glob`; a run changed
    within `quiet_s` seconds (the host's runs_quiet_min) counts as training."""
    root = resolve_root(runs_root)
    index = index_root(root)
    index.quiet_s = quiet_s
    rows = []
    for name in sorted(os.listdir(root)):
        if fnmatch.fnmatchcase(name, run_glob):
            row = scan_run(root, name, host, index)
            if row is not None:
                rows.append(row)
    return rows
