"""Where a command writes a file: checked before any work, and said in one line when it cannot be.

Every command that writes a file (report and report --out, compare --plot, history --plot, store
export) asks `writable_file` or `writable_folder` first, and writes inside `writing`: a read-only
file system, a directory where a file is wanted, a missing parent folder, no permission or no space
are one line naming the path and why, exit 2, never a traceback and never a half-written file left
under the final name. Missing parent folders are made only inside the store (`make_under`) or when
the user said so with --mkdir: `report --out /nonexistent/sub/r.html` used to make both folders.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import tempfile
from collections.abc import Iterator
from pathlib import Path

from probes.result import InputError

MKDIR_HELP = "make the output's missing parent folders (default: refused, outside the store)"


def add_mkdir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mkdir", action="store_true", help=MKDIR_HELP)


def writable_file(path: Path, *, what: str, mkdir: bool = False, make_under: Path | None = None) -> Path:
    """`path` once a file can be written there (its folder made when `mkdir`, or when it lies under
    `make_under`); InputError in one line otherwise. `what` names it for the user (`--out`, `report`)."""
    path = Path(path)
    with _one_line(what, path):  # pathlib's is_dir lets ENAMETOOLONG (a name past NAME_MAX) through
        return _writable_file(path, what=what, mkdir=mkdir, make_under=make_under)


def _writable_file(path: Path, *, what: str, mkdir: bool, make_under: Path | None) -> Path:
    if path.is_dir():
        raise InputError(f"{what} {path}: is a directory, give a file name")
    if path.exists() and not path.is_file():
        raise InputError(f"{what} {path}: not a regular file")
    _parent_ready(path.parent, what=what, path=path, mkdir=mkdir or _inside(path, make_under))
    _try_write_in(path.parent, what=what, path=path)
    return path


def writable_folder(folder: Path, *, what: str, mkdir: bool = False) -> Path:
    """`folder` once files can be written into it (made when its parent exists, or with `mkdir`)."""
    folder = Path(folder)
    with _one_line(what, folder):
        return _writable_folder(folder, what=what, mkdir=mkdir)


def _writable_folder(folder: Path, *, what: str, mkdir: bool) -> Path:
    if folder.exists() and not folder.is_dir():
        raise InputError(f"{what} {folder}: not a directory")
    if not folder.exists():
        _parent_ready(folder.parent, what=what, path=folder, mkdir=mkdir)
        _try_write_in(folder.parent, what=what, path=folder)
        return folder
    _try_write_in(folder, what=what, path=folder)
    return folder


@contextlib.contextmanager
def writing(path: Path, *, what: str) -> Iterator[None]:
    """An OSError while writing `path` (the disk filled, the mount went read-only) as one line."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write it: {_why(exc)}") from None


@contextlib.contextmanager
def _one_line(what: str, path: Path) -> Iterator[None]:
    """An OSError while looking at `path` (a name too long, a loop of links) as one line."""
    try:
        yield
    except OSError as exc:
        raise InputError(f"{what} {path}: {_why(exc)}") from None


def _parent_ready(parent: Path, *, what: str, path: Path, mkdir: bool) -> None:
    if parent.is_dir():
        return
    if parent.exists() or parent.is_symlink():
        raise InputError(f"{what} {path}: {parent} is not a directory")
    if not mkdir:
        raise InputError(f"{what} {path}: its folder {parent} does not exist (make it, or pass --mkdir)")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot make its folder {parent}: {_why(exc)}") from None


def _try_write_in(folder: Path, *, what: str, path: Path) -> None:
    """Create and remove a temporary file in `folder`: the one test that sees a read-only mount, a
    full disk and permissions alike (os.access says yes to root on a 0555 folder)."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".labprobe-write-test-"):
            pass
    except OSError as exc:
        raise InputError(f"{what} {path}: cannot write in {folder}: {_why(exc)}") from None


def _inside(path: Path, root: Path | None) -> bool:
    if root is None:
        return False
    try:
        return path.absolute().resolve().is_relative_to(Path(root).absolute().resolve())
    except OSError:
        return False


def _why(exc: OSError) -> str:
    reasons = {errno.EROFS: "read-only file system", errno.EISDIR: "is a directory", errno.ENOSPC: "no space left"}
    return reasons.get(exc.errno or 0, exc.strerror or str(exc)).lower()
