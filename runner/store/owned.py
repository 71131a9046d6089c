"""Deleting only what a root owns: the one way the store's chores remove a file.

A chore (vacuum, export's stale files) is handed a root it owns (the
store's root, an export folder) and a path under it. The path is reached from the root one folder
at a time through directory fds opened with O_NOFOLLOW: a symlink anywhere below the root is never
followed (a link in a table folder to /elsewhere: its files are not the store's), a folder on
another mount (another filesystem, or a bind mount of this one) is never entered, and the final
name must be a regular file (a symlink there is left alone: unlinking it is harmless, but it is not
the store's to remove). The root itself may be a symlink: the user named it. Whatever is refused
comes back as a reason; `store check` lists the links and mounts it finds (`links_and_mounts`).
Compaction's log cleanup is delta-rs' own and follows links: `only_files` says when a log holds
nothing but regular files, the only case it is let run.

Functions take the root as a path, so whoever opens the store (a path today, more later) can hand
its root to them.
"""

from __future__ import annotations

import os
import stat

from runner.store.nofollow import DIR_FLAGS, mount_id, readable, walk


class Refused(Exception):
    """A path under a root that a chore must not delete (a link on the way, another mount, outside)."""


def delete_file(root: str, rel: str, *, dry_run: bool = False) -> str | None:
    """Unlink `rel` (a path relative to `root`) when it is a regular file the root owns; -> None when
    deleted (or gone meanwhile), else why it was left alone. `dry_run`: only say."""
    try:
        parent_fd, name = _parent(root, rel)
    except FileNotFoundError:
        return None
    except Refused as exc:
        return str(exc)
    except OSError as exc:  # a folder swapped for a link or a file since it was checked: O_NOFOLLOW said so
        return _changed(rel, exc)
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            return f"{readable(rel)} is a symlink: not the store's, left alone"
        if not stat.S_ISREG(st.st_mode):
            return f"{readable(rel)} is not a regular file: left alone"
        if not dry_run:
            os.unlink(name, dir_fd=parent_fd)  # a swap for a link since the stat: the link goes, never its target
    except FileNotFoundError:
        return None
    except OSError as exc:  # swapped for a folder since the stat (unlink never removes one)
        return _changed(rel, exc)
    finally:
        os.close(parent_fd)
    return None


def _changed(rel: str, exc: OSError) -> str:
    return f"{readable(rel)} changed while it was checked ({exc.strerror or exc}): left alone"


def folder_problem(root: str, rel: str) -> str | None:
    """Why folder `rel` under `root` is not the root's to delete in (a symlink on the way, another
    mount, not a folder, resolving outside), or None (also when it does not exist: nothing there)."""
    try:
        os.close(_open_folder(root, [p for p in rel.split("/") if p not in ("", ".")]))
    except FileNotFoundError:
        return None
    except Refused as exc:
        return str(exc)
    except OSError as exc:
        return _changed(rel, exc)
    return None


def only_files(root: str, rel: str) -> str | None:
    """Why folder `rel` under `root` is not one a foreign deleter (delta-rs' expired-log cleanup, which
    lists the folder following links) may delete in: the way there holds a link or a mount, or the folder
    holds anything but regular files (a link, a subfolder, a FIFO). None when it is safe, or absent."""
    why = folder_problem(root, rel)
    if why:
        return why
    try:
        fd = _open_folder(root, [p for p in rel.split("/") if p not in ("", ".")])
    except FileNotFoundError:
        return None
    except (Refused, OSError) as exc:  # swapped since folder_problem looked
        return str(exc) if isinstance(exc, Refused) else _changed(rel, exc)
    try:
        with os.scandir(fd) as entries:
            for entry in entries:
                mode = entry.stat(follow_symlinks=False).st_mode
                if not stat.S_ISREG(mode):
                    kind = "a symlink" if stat.S_ISLNK(mode) else "a folder" if stat.S_ISDIR(mode) else "not a file"
                    return f"{readable(rel)}/{readable(entry.name)} is {kind}: nothing is deleted there"
    except OSError as exc:
        return _changed(rel, exc)
    finally:
        os.close(fd)
    return None


def _parent(root: str, rel: str) -> tuple[int, str]:
    """(fd of `rel`'s folder, reached without a link or a mount change, final name). FileNotFoundError
    when a folder on the way is gone; Refused for a link, a mount, `..` or a path leaving the root."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts:
        raise Refused(f"{readable(rel)}: not a file under {readable(root)}")
    return _open_folder(root, parts[:-1], whole=parts), parts[-1]


def _open_folder(root: str, parts: list[str], whole: list[str] | None = None) -> int:
    """An fd of folder root/parts..., each entered with O_NOFOLLOW on the root's mount; the real path
    of root/whole (default: the folder) must be inside the root's."""
    if ".." in (whole or parts):
        raise Refused(f"{readable('/'.join(whole or parts))}: not a path inside {readable(root)}")
    real = os.path.realpath(os.path.join(root, *(whole or parts)))
    if not _inside(real, os.path.realpath(root)):
        shown = readable("/".join(whole or parts))
        raise Refused(f"{shown} resolves outside {readable(root)} (to {readable(real)}): left alone")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    top_dev, top_mount = os.fstat(fd).st_dev, mount_id(fd)
    try:
        for i, part in enumerate(parts):
            shown = readable("/".join(parts[: i + 1]))
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise Refused(f"{shown} is a symlink: not followed")
            if not stat.S_ISDIR(st.st_mode):
                raise Refused(f"{shown} is not a folder")
            child = os.open(part, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
            if os.fstat(fd).st_dev != top_dev or mount_id(fd) != top_mount:
                raise Refused(f"{shown} is on another mount: not entered")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def links_and_mounts(root: str) -> list[tuple[str, str]]:
    """(path relative to `root`, what it is) for every symlink and every folder on another mount
    found under `root`, walked without following either: what the chores leave alone."""
    found = []
    try:
        top = os.lstat(root) if not os.path.islink(root) else os.stat(root)
    except OSError:
        return []
    top_mount = _mount_of(root)
    for folder, dirs, files in walk(os.path.realpath(root)):
        rel_folder = os.path.relpath(folder, os.path.realpath(root))
        for name in files:
            path = os.path.join(folder, name)
            try:
                if os.path.islink(path):
                    found.append((_rel(rel_folder, name), f"symlink -> {readable(os.readlink(path))}"))
            except OSError:
                continue
        for name in list(dirs):
            path = os.path.join(folder, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if st.st_dev != top.st_dev or _mount_of(path) != top_mount:
                found.append((_rel(rel_folder, name), "another mount (a mount point or bind mount)"))
                dirs.remove(name)  # walk does not enter what was taken out of `dirs`
    return sorted(found)


def _rel(folder: str, name: str) -> str:
    return readable(name if folder == "." else f"{folder}/{name}")


def _mount_of(path: str) -> int | None:
    try:
        fd = os.open(path, DIR_FLAGS)
    except OSError:
        return None
    try:
        return mount_id(fd)
    finally:
        os.close(fd)
