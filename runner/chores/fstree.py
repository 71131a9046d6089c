"""Directory trees walked, removed and digested without following a symlink or leaving a mount.

The mechanism under `labprobe purge` (runner.chores.scan decides what may be removed): nothing
here knows about runs, adapters or checkpoints. `walk_tree` looks with lstat only; `remove_tree`
deletes through directory fds opened with O_NOFOLLOW, so a link swapped in after a check is
unlinked, never followed, and a directory on another mount (a bind mount of the same filesystem
included) is never entered. `tree_digests` reads regular files only, never blocking on a FIFO or
opening a device. `link_trail` says every place a symlink's resolution passes through.
`readable`, `walk`, `mount_id` and DIR_FLAGS live in runner.store.nofollow (the store's deletion guard
needs them too, a layer below) and are imported from here as well.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import hashlib
import os
import stat

from runner.store.nofollow import DIR_FLAGS, mount_id, walk
from runner.store.nofollow import readable as readable  # re-exported: the chores name it from here

READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | getattr(os, "O_NOCTTY", 0)
"""Open a file to read it: never through a symlink, never blocking on a FIFO."""
UNVERIFIABLE = "not read: "
"""Prefix of a digest entry naming what could not be read (a digest holding one is never verified)."""


@dataclasses.dataclass
class Tree:
    """What a no-follow walk of one directory found."""

    files: dict[tuple[int, int], str] = dataclasses.field(default_factory=dict)
    dirs: set[tuple[int, int]] = dataclasses.field(default_factory=set)
    num_files: int = 0
    bytes: int = 0
    alloc_bytes: int = 0
    symlinks: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    """(relative path, link text) of each symlink met."""
    specials: list[str] = dataclasses.field(default_factory=list)
    """`relative path (kind)` of each entry that is neither a regular file, a directory nor a link."""
    shared: dict[tuple[int, int], list[str]] = dataclasses.field(default_factory=dict)
    """Every name met of each inode that has more than one (hard links)."""
    mounts: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)
    newest_ns: dict[str, int] = dataclasses.field(default_factory=dict)
    """Per entry directly under the top: the newest mtime (ns) at or under it (an entry added or
    renamed in a folder moves the folder's mtime; ctime also moves on chmod and link counts)."""
    entries: list[str] = dataclasses.field(default_factory=list)
    """`relative path, size, mtime` of every entry met (not in an index walk): what `fingerprint` hashes."""

    def fingerprint(self) -> str:
        """sha256 of the sorted listing: equal only when no entry was added, removed or rewritten."""
        return hashlib.sha256("\n".join(sorted(self.entries)).encode("utf-8", "surrogateescape")).hexdigest()

    def newest(self) -> int:
        return max(self.newest_ns.values(), default=0)


def file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return kind
    return "regular file" if stat.S_ISREG(mode) else "unknown file type"


def walk_tree(top: str, label: str, *, index_only: bool = False) -> Tree:
    """Walk `top` with lstat only: symlinks are recorded, never followed; other filesystems are
    recorded, never entered. Paths are reported as `label/relative`. `index_only`: the links and
    hard links of a whole runs root: other filesystems are entered too (a link on one can lead
    anywhere), `files` and sizes are not kept (they would be every file of every run)."""
    tree = Tree()
    try:
        top_st = os.lstat(top)
    except OSError as exc:  # gone or replaced since the caller looked: an error, never a guess
        tree.errors.append(f"cannot stat {label}: {exc.strerror}")
        return tree
    if not stat.S_ISDIR(top_st.st_mode):
        tree.errors.append(f"{label} changed while it was read (now a {file_kind(top_st.st_mode)})")
        return tree
    tree.dirs.add((top_st.st_dev, top_st.st_ino))
    stack = [(top, label)]
    while stack:
        path, shown = stack.pop()
        try:
            with os.scandir(path) as entries:
                found = list(entries)
        except OSError as exc:
            tree.errors.append(f"cannot list {shown}: {exc.strerror}")
            continue
        for entry in found:
            rel = f"{shown}/{entry.name}"
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                tree.errors.append(f"cannot stat {rel}: {exc.strerror}")
                continue
            _note(tree, rel[len(label) + 1 :], st, index_only)
            if stat.S_ISLNK(st.st_mode):
                try:
                    tree.symlinks.append((rel, os.readlink(entry.path)))
                except OSError as exc:  # replaced since it was listed
                    tree.errors.append(f"cannot read the link {rel}: {exc.strerror}")
            elif stat.S_ISDIR(st.st_mode):
                if st.st_dev != top_st.st_dev:
                    tree.mounts.append(rel)
                    if not index_only:
                        continue
                if (st.st_dev, st.st_ino) not in tree.dirs:  # a bind mount can show a folder twice
                    tree.dirs.add((st.st_dev, st.st_ino))
                    stack.append((entry.path, rel))
            else:
                if not stat.S_ISREG(st.st_mode):
                    tree.specials.append(f"{rel} ({file_kind(st.st_mode)})")
                if st.st_nlink > 1:
                    tree.shared.setdefault((st.st_dev, st.st_ino), []).append(rel)
                tree.num_files += 1
                if (st.st_dev, st.st_ino) not in tree.files and not index_only:
                    tree.files[(st.st_dev, st.st_ino)] = rel
                    tree.bytes += st.st_size
                    tree.alloc_bytes += st.st_blocks * 512
    return tree


def _note(tree: Tree, rel: str, st: os.stat_result, index_only: bool) -> None:
    """The entry's time under its top-level name, and (not indexing) its line of the listing."""
    first = rel.split("/", 1)[0]
    if st.st_mtime_ns > tree.newest_ns.get(first, 0):
        tree.newest_ns[first] = st.st_mtime_ns
    if not index_only:
        tree.entries.append(f"{rel}\0{stat.S_IFMT(st.st_mode)}\0{st.st_size}\0{st.st_mtime_ns}")


def is_inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def link_trail(link: str, max_links: int = 40) -> list[str]:
    """Every absolute path the resolution of symlink `link` passes through, in order, its target
    last (as far as it exists): following `a -> ../b/checkpoints/x/../../merged` passes through
    b/checkpoints even though the target is b/merged, and breaks when checkpoints/ goes.
    OSError when `link` is no longer a symlink."""
    trail: list[str] = []
    text = os.readlink(link)
    current = os.sep if text.startswith(os.sep) else os.path.realpath(os.path.dirname(os.path.abspath(link)))
    pending = _components(text)
    num_links = 1
    while pending:
        part = pending.pop(0)
        if part == "..":
            current = os.path.dirname(current)
        elif part != ".":
            candidate = os.path.join(current, part)
            try:
                is_link = stat.S_ISLNK(os.lstat(candidate).st_mode)
            except OSError:  # dangling from here on: the rest is where it would lead
                trail.append(os.path.normpath(os.path.join(candidate, *pending)))
                return trail
            if is_link and num_links < max_links:
                num_links += 1
                text = os.readlink(candidate)
                current = os.sep if text.startswith(os.sep) else current
                pending = _components(text) + pending
                continue
            current = candidate
        trail.append(current)
    return trail or [current]


def _components(text: str) -> list[str]:
    return [p for p in text.split(os.sep) if p]


def remove_tree(name: str, parent_fd: int, expect: tuple[int, int] | None = None) -> None:
    """Delete directory `name` under `parent_fd` bottom-up through directory fds opened with
    O_NOFOLLOW: a symlink is unlinked, never followed; a directory on another mount (another
    filesystem or a bind mount) is an error, never descended; a directory swapped since it was
    checked (`expect`: dev, ino) is an error. Iterative, holding two fds at most: a tree of any
    depth (the way back up is `..`, checked to be the folder it came from)."""
    fd = _enter(name, parent_fd, expect)
    frames = [(name, _identity(fd), _clear_files(fd))]  # (name, (dev, ino), subfolders left)
    try:
        while frames:
            _, _, pending = frames[-1]
            if pending:
                child, dev, ino = pending.pop()
                child_fd = _enter(child, fd, (dev, ino))
                os.close(fd)
                fd = child_fd
                frames.append((child, (dev, ino), _clear_files(fd)))
                continue
            done, _, _ = frames.pop()
            up = os.open("..", DIR_FLAGS, dir_fd=fd) if frames else None
            os.close(fd)
            fd = up
            if up is None:
                os.rmdir(name, dir_fd=parent_fd)
            elif _identity(up) != frames[-1][1]:
                raise OSError(f"{frames[-1][0]} changed while it was being removed")
            else:
                os.rmdir(done, dir_fd=up)
    finally:
        if fd is not None:
            os.close(fd)


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _enter(name: str, parent_fd: int, expect: tuple[int, int] | None) -> int:
    """Open folder `name` of `parent_fd`, refusing a link, a swap and another mount."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{name} is no longer a directory")
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        opened = os.fstat(fd)
        if not os.path.samestat(st, opened) or (expect and expect != (opened.st_dev, opened.st_ino)):
            raise OSError(f"{name} changed while it was being removed")
        if opened.st_dev != os.fstat(parent_fd).st_dev or mount_id(fd) != mount_id(parent_fd):
            raise OSError(f"{name} is a mount point")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clear_files(fd: int) -> list[tuple[str, int, int]]:
    """Unlink everything in the folder but its subfolders; those back as (name, dev, ino)."""
    with os.scandir(fd) as entries:
        found = list(entries)
    folders = []
    for entry in found:
        if entry.is_dir(follow_symlinks=False):
            child = entry.stat(follow_symlinks=False)
            folders.append((entry.name, child.st_dev, child.st_ino))
        else:
            os.unlink(entry.name, dir_fd=fd)
    return folders


_RENAME_NOREPLACE = 1
_LIBC = ctypes.CDLL(None, use_errno=True)


def rename_noreplace(src: str, dst: str, src_dir_fd: int, dst_dir_fd: int) -> None:
    """renameat2(RENAME_NOREPLACE): FileExistsError rather than replacing `dst`. Where the kernel
    or filesystem lacks it, a check then a rename (a window of a few microseconds)."""
    call = getattr(_LIBC, "renameat2", None)
    if call is not None:
        if call(src_dir_fd, os.fsencode(src), dst_dir_fd, os.fsencode(dst), _RENAME_NOREPLACE) == 0:
            return
        code = ctypes.get_errno()
        if code not in (errno.ENOSYS, errno.EINVAL):
            raise OSError(code, os.strerror(code), src)
    try:
        os.stat(dst, dir_fd=dst_dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)
        return
    raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), dst)


def tree_digests(folder: str) -> dict[str, str]:
    """sha256 of every regular file under `folder` (relative path -> hex). Links are followed to
    a regular file (bytes behind a link into a deleted tree then show as changed); anything else
    (a dangling link, a link to a directory, a FIFO, a socket, a device, an unreadable file) is an
    entry starting with UNVERIFIABLE, read neither now nor ever: a FIFO never blocks the digest."""
    try:
        top = os.path.realpath(folder)
    except OSError as exc:  # a link swapped while resolved (EINVAL, ELOOP): unverifiable, never a crash
        return {".": f"{UNVERIFIABLE}{exc.strerror or exc}"}
    digests = {}
    for parent, dirs, files in walk(top):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(parent, d))]:
            path = os.path.join(parent, name)
            digests[os.path.relpath(path, top)] = file_sha256(path, follow=True)
    return digests


def file_sha256(path: str, *, follow: bool = False) -> str:
    """The file's sha256, or UNVERIFIABLE and why when it is not a regular file one can read.
    The kind is known before the file is opened (a device is never opened) and checked again on
    the open fd (a swap in between is caught)."""
    try:
        before = os.stat(path, follow_symlinks=follow)
        if not stat.S_ISREG(before.st_mode):
            return f"{UNVERIFIABLE}{file_kind(before.st_mode)}"
        fd = os.open(os.path.realpath(path) if follow else path, READ_FLAGS)
    except OSError as exc:
        return f"{UNVERIFIABLE}{exc.strerror or exc}"
    digest = hashlib.sha256()
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode) or not os.path.samestat(before, opened):
            return f"{UNVERIFIABLE}replaced while read"
        try:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
        except OSError as exc:
            return f"{UNVERIFIABLE}{exc.strerror or exc}"
    return digest.hexdigest()
