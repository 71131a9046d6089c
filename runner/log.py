"""The runner's messages, and where Ray's own output goes.

Runner messages (progress, warnings) go through the `labprobe` logger: on a terminal they read as
before, one plain line each; anywhere else (a cron log, a pipe) each line starts with a UTC timestamp,
so a night's log can be read back. One-line errors of the CLI stay plain `print`s: they are the
command's answer, not a log.

`foreign_output_to(path)` keeps Ray's output off the user's terminal for the length of a command: Ray
prints its error feed (a dead node's raylet log tail) to `sys.stdout`, its banners through the `ray`
logger, and its C++ core writes warnings straight to file descriptor 2. All three go to `path`; the
command's own output goes to the streams it yields.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import stat
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

logger = logging.getLogger("labprobe")

_terminal: dict[str, TextIO | None] = {"err": None}
"""Where runner messages go while `foreign_output_to` holds the real stderr; None: sys.stderr."""


class _TerminalHandler(logging.Handler):
    """Writes to the user's stderr of the moment (pytest and `foreign_output_to` swap it), plain on
    a terminal, timestamped elsewhere."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = terminal_err()
        try:
            stream.write((_PLAIN if _isatty(stream) else _STAMPED).format(record) + "\n")
            stream.flush()
        except Exception:  # noqa: BLE001 - logging's own rule: a message that cannot be written is reported, not raised
            self.handleError(record)


_PLAIN = logging.Formatter("%(message)s")
_STAMPED = logging.Formatter("%(asctime)s %(message)s", datefmt="%Y-%m-%dT%H:%M:%SZ")
_STAMPED.converter = time.gmtime


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: treat as a log
        return False


def say(message: str) -> None:
    """A line for someone watching a terminal (what is happening during a quiet start); nothing in a
    cron log or a pipe, where errors must stay one line and progress lines say enough."""
    if _isatty(terminal_err()):
        logger.info(message)


def terminal_err() -> TextIO:
    """The user's stderr, also while `foreign_output_to` sends descriptor 2 to a log file."""
    return _terminal["err"] or sys.stderr


def setup() -> logging.Logger:
    """The `labprobe` logger with its one terminal handler (idempotent)."""
    if not any(isinstance(h, _TerminalHandler) for h in logger.handlers):
        logger.addHandler(_TerminalHandler())
        logger.setLevel(logging.INFO)
        logger.propagate = False
    return logger


def _append_fd(path: Path) -> int:
    """`path` opened to append when it is a plain file of its own (never through a symlink, never a
    hard link's second name, never a FIFO): a link planted at a fixed log name (logs/ray-purge.log, or
    in $TMPDIR) had Ray's output appended to whatever it named. Else a fresh file in $TMPDIR, warned."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        why = exc.strerror or str(exc)
    else:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
            os.set_blocking(fd, True)
            return fd
        os.close(fd)
        why = "not a plain file of its own (a hard link or a FIFO)"
    fd, name = tempfile.mkstemp(prefix="labprobe-ray-", suffix=".log")
    logger.warning(f"labprobe: {path}: {why}: not appended to; Ray's output goes to {name}")
    return fd


@contextlib.contextmanager
def foreign_output_to(path: Path) -> Iterator[tuple[TextIO, TextIO]]:
    """Send Ray's output (Python streams, the `ray` logger, file descriptors 1 and 2) to `path`,
    appended; yield (stdout, stderr) that still reach the user. Restores everything on exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log_file = os.fdopen(_append_fd(path), "a", buffering=1, encoding="utf-8", errors="replace")
    out, err = _keep(sys.stdout, 1), _keep(sys.stderr, 2)
    saved_fds = _redirect_fds(log_file.fileno())
    ray_logger = logging.getLogger("ray")
    handler = logging.StreamHandler(log_file)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    ray_propagates = ray_logger.propagate
    ray_logger.addHandler(handler)
    ray_logger.propagate = False
    real = (sys.stdout, sys.stderr)
    sys.stdout = sys.stderr = log_file
    _terminal["err"] = err
    try:
        yield out, err
    finally:
        _terminal["err"] = None
        sys.stdout, sys.stderr = real
        ray_logger.removeHandler(handler)
        ray_logger.propagate = ray_propagates
        for stream in (out, err):
            stream.flush()
        _restore_fds(saved_fds)
        for stream, original in ((out, real[0]), (err, real[1])):
            if stream is not original:
                stream.close()
        log_file.close()
        with contextlib.suppress(OSError):
            if path.stat().st_size == 0:  # Ray said nothing: leave no empty log behind
                path.unlink()


def _keep(stream: TextIO, fd: int) -> TextIO:
    """A stream that keeps reaching where `stream` does once descriptor `fd` is redirected."""
    try:
        same = stream.fileno() == fd
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        same = False  # pytest's capture, a StringIO: not the descriptor, unaffected
    if not same:
        return stream
    stream.flush()
    return open(os.dup(fd), "w", buffering=1, encoding=stream.encoding or "utf-8", errors="replace")


def _redirect_fds(target: int) -> dict[int, int]:
    saved = {}
    for fd in (1, 2):
        try:
            saved[fd] = os.dup(fd)
        except OSError:  # a closed descriptor (a daemon): nothing to keep
            continue
        os.dup2(target, fd)
    return saved


def _restore_fds(saved: dict[int, int]) -> None:
    for fd, copy in saved.items():
        os.dup2(copy, fd)
        os.close(copy)
