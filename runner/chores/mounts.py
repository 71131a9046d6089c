"""The mount table and the filesystems a purge touches, read on the host itself.

`read_mounts` parses /proc/self/mountinfo (every mount this process sees, bind mounts included:
st_dev alone cannot tell a bind mount of the same filesystem from a plain directory).
`mount_points_under` is what the purge's refusals use; `filesystems` measures, per filesystem
holding planned checkpoints/, the bytes planned and removed and the space available before and
after, and asks `zfs` whether snapshots keep that space held.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import subprocess
from typing import Any

from runner.chores.fstree import is_inside

MOUNTINFO = "/proc/self/mountinfo"


def read_mounts(mountinfo: str = MOUNTINFO) -> list[dict[str, str]]:
    """Mounts from mountinfo: major:minor, mount point, fstype, source (a ZFS dataset's name).
    Paths come back as the os functions carry them (undecodable bytes surrogate-escaped)."""
    try:
        with open(mountinfo, "rb") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if b"-" not in fields[6:] or len(fields) < fields.index(b"-", 6) + 3:
            continue
        sep = fields.index(b"-", 6)
        mounts.append(
            {
                "dev": fields[2].decode(),
                "mount": _unescape(fields[4]),
                "fstype": os.fsdecode(fields[sep + 1]),
                "source": _unescape(fields[sep + 2]),
            }
        )
    return mounts


def _unescape(field: bytes) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040), of bytes."""
    return os.fsdecode(re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m.group(1), 8)]), field))


def sync_filesystem(path: str) -> None:
    """Flush the pending writes and frees of the filesystem holding `path` (syncfs(2)), not every
    filesystem of the machine (sync(2), the fallback where libc has no syncfs)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if not hasattr(libc, "syncfs") or libc.syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)


def mount_points_under(folder: str, mounts: list[dict[str, str]] | None = None) -> list[str]:
    """Mount points at or below `folder` (a real path), whatever their filesystem."""
    mounts = read_mounts() if mounts is None else mounts
    return sorted({m["mount"] for m in mounts if is_inside(m["mount"], folder)})


def mount_of(path: str, dev: int, mounts: list[dict[str, str]]) -> dict[str, str]:
    """The mount holding `path`: the deepest mount point above it, preferring those whose
    major:minor is the path's st_dev (btrfs subvolumes report another device)."""
    real = os.path.realpath(os.path.dirname(path))
    above = [m for m in mounts if is_inside(real, m["mount"])]
    same_dev = [m for m in above if m["dev"] == f"{os.major(dev)}:{os.minor(dev)}"]
    candidates = same_dev or above
    return max(candidates, key=lambda m: len(m["mount"])) if candidates else {}


def zfs_snapshot_note(dataset: str, zfs: str = "zfs") -> tuple[int | None, str]:
    """How many snapshots the dataset has, and what that means for the space purged."""
    cmd = [zfs, "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", dataset]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        return None, ("ZFS, but no `zfs` command on this host: cannot tell whether snapshots hold the purged space")
    except subprocess.TimeoutExpired:
        return None, "ZFS: `zfs list` gave no answer within 30 s: snapshots unknown"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"ZFS: `zfs list` failed ({last}): snapshots unknown"
    num = sum(1 for name in done.stdout.splitlines() if name.startswith(f"{dataset}@"))
    if num == 0:
        return 0, "ZFS, no snapshots of the dataset: the space is returned (ZFS frees asynchronously)"
    return num, (
        f"ZFS dataset {dataset} has {num} snapshot(s): the purged space stays held by "
        "them, not returned, until they are destroyed"
    )


@dataclasses.dataclass(kw_only=True)
class FsRow:
    """One filesystem holding planned checkpoints/ on one host."""

    host: str
    fs: str
    fstype: str
    mount: str
    source: str
    planned_bytes: int
    """Allocated bytes of the checkpoints/ planned for removal on this filesystem."""
    removed_bytes: int = 0
    """Allocated bytes of the checkpoints/ actually removed."""
    avail_before_bytes: int | None = None
    avail_after_bytes: int | None = None
    freed_bytes: int | None = None
    """Measured: available bytes after minus before (other writers on the filesystem blur it)."""
    zfs_snapshots: int | None = None
    note: str = ""


def filesystems(
    rows: list[Any],
    host: str,
    before: dict[int, int],
    after: dict[int, int] | None = None,
    outcome: list[Any] | None = None,
    *,
    mountinfo: str = MOUNTINFO,
    zfs: str = "zfs",
) -> list[FsRow]:
    """Per filesystem of `rows` (scan.ActionRow): planned and removed bytes, space measured
    before/after, and the ZFS snapshots that would keep the space held."""
    mounts = read_mounts(mountinfo)
    out = []
    for dev in sorted({r.dev for r in rows}):
        mine = [r for r in rows if r.dev == dev]
        mount = mount_of(mine[0].real_path, dev, mounts)
        fs = FsRow(
            host=host,
            fs=mine[0].fs,
            fstype=mount.get("fstype", "?"),
            mount=mount.get("mount", "?"),
            source=mount.get("source", "?"),
            planned_bytes=sum(r.alloc_bytes for r in mine),
            avail_before_bytes=before.get(dev),
        )
        if outcome is not None:
            fs.removed_bytes = sum(r.alloc_bytes for r in outcome if r.dev == dev and r.action == "removed")
        if after is not None and dev in after and dev in before:
            fs.avail_after_bytes = after[dev]
            fs.freed_bytes = after[dev] - before[dev]
        if fs.fstype == "zfs":
            fs.zfs_snapshots, fs.note = zfs_snapshot_note(fs.source, zfs)
        elif fs.freed_bytes is not None and fs.freed_bytes < fs.removed_bytes // 2:
            fs.note = (
                "less came back than was removed: files still open (a running job), hard "
                "links elsewhere, or other writers on this filesystem meanwhile"
            )
        out.append(fs)
    return out
