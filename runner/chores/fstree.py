"""Directory trees walked, removed and digested without following a symlink or leaving a filesystem.

The mechanism under `labprobe purge` (runner/chores/purge_fs.py decides what may be removed): nothing
here knows about runs, adapters or checkpoints. `walk_tree` looks with lstat only; `remove_tree`
deletes through directory fds opened with O_NOFOLLOW, so a link swapped in after a check is
unlinked, never followed; `tree_digests` reads file contents (the one place links are followed).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
"""Open a directory, never through a symlink."""


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
    mounts: list[str] = dataclasses.field(default_factory=list)
    errors: list[str] = dataclasses.field(default_factory=list)


def walk_tree(top: str, label: str) -> Tree:
    """Walk `top` with lstat only: symlinks are recorded, never followed; other filesystems are
    recorded, never entered. Paths are reported as `label/relative`."""
    tree = Tree()
    top_st = os.lstat(top)
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
            if stat.S_ISLNK(st.st_mode):
                tree.symlinks.append((rel, os.readlink(entry.path)))
            elif stat.S_ISDIR(st.st_mode):
                if st.st_dev != top_st.st_dev:
                    tree.mounts.append(rel)
                    continue
                tree.dirs.add((st.st_dev, st.st_ino))
                stack.append((entry.path, rel))
            else:
                tree.num_files += 1
                if (st.st_dev, st.st_ino) not in tree.files:
                    tree.files[(st.st_dev, st.st_ino)] = rel
                    tree.bytes += st.st_size
                    tree.alloc_bytes += st.st_blocks * 512
    return tree


def is_inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def remove_tree(name: str, parent_fd: int, expect: tuple[int, int] | None = None) -> None:
    """Delete directory `name` under `parent_fd` bottom-up through directory fds opened with
    O_NOFOLLOW: a symlink is unlinked, never followed; a directory on another device is an error
    (never descended); a directory swapped since it was checked (`expect`: dev, ino) is an error."""
    st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{name} is no longer a directory")
    fd = os.open(name, DIR_FLAGS, dir_fd=parent_fd)
    try:
        opened = os.fstat(fd)
        if not os.path.samestat(st, opened) or (expect and expect != (opened.st_dev, opened.st_ino)):
            raise OSError(f"{name} changed while it was being removed")
        with os.scandir(fd) as entries:
            found = list(entries)
        for entry in found:
            if entry.is_dir(follow_symlinks=False):
                child = entry.stat(follow_symlinks=False)
                if child.st_dev != opened.st_dev:
                    raise OSError(f"{entry.name} is another filesystem's mount point")
                remove_tree(entry.name, fd, (child.st_dev, child.st_ino))
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def tree_digests(folder: str) -> dict[str, str]:
    """sha256 of every file under `folder` (relative path -> hex). Reading is harmless, so links
    are followed here (unlike anywhere else): bytes that lived behind a link into a deleted tree
    show as changed, a dangling link or a link to a directory as `unreadable: ...`."""
    top = os.path.realpath(folder)
    digests = {}
    for parent, dirs, files in os.walk(top, followlinks=False):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(parent, d))]:
            path = os.path.join(parent, name)
            digests[os.path.relpath(path, top)] = _sha256(path)
    return digests


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError as exc:  # a dangling link, a link to a directory: recorded, compared as such
        return f"unreadable: {exc.strerror}"
    return digest.hexdigest()
