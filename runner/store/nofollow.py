"""Filesystem primitives that never follow a symlink: the store's deletion guard (runner.store.owned)
and the purge's tree walks (runner.chores.fstree) both stand on them, so they live at the store's
layer. `readable` turns a file name (bytes on POSIX, carried as surrogate-escaped str) into printable
text, one to one.
"""

from __future__ import annotations

import os

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
"""Open a directory, never through a symlink."""


def walk(top: str):
    """os.walk(top, followlinks=False) without recursion (Python 3.11's recurses: a tree 1,000
    levels deep raises RecursionError): (folder, dirs, files), top-down, errors skipped."""
    stack = [top]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as found:
                entries = list(found)
        except OSError:
            continue
        dirs, files = [], []
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            (dirs if is_dir else files).append(entry.name)
        yield folder, dirs, files
        stack.extend(os.path.join(folder, d) for d in reversed(dirs))


def mount_id(fd: int) -> int | None:
    """The mount an open file lives on (/proc/self/fdinfo's mnt_id); None where /proc cannot say.
    st_dev cannot tell a bind mount of the same filesystem from a plain directory; this can."""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("mnt_id:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def readable(name: str) -> str:
    """A file name or path as printable text, one to one: bytes that are not UTF-8 (carried by
    os functions as surrogate escapes) and control characters become `\\xNN`, a backslash `\\\\`."""
    out = []
    for char in name:
        code = ord(char)
        if char == "\\":
            out.append("\\\\")
        elif 0xDC80 <= code <= 0xDCFF:  # os.fsdecode's escape of one undecodable byte
            out.append(f"\\x{code - 0xDC00:02x}")
        elif code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
        else:
            out.append(char)
    return "".join(out)
