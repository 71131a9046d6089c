"""A sweep's driver at its edges: Ctrl-C, and a Ray that cannot start.

Ctrl-C: the first raises KeyboardInterrupt (the CLI prints one line and exits 130); every later one
is ignored until the process exits, while Ray shuts down. A second Ctrl-C used to land inside
`ray.shutdown` (a KeyboardInterrupt traceback from Ray's atexit hook, a segfault or a C++ abort,
with Ray's raylet and GCS left running). Ray is shut down here, before the interpreter exits.

A Ray whose temporary folder cannot be made (TMPDIR a file, unwritable, full, or so deep that its
socket paths pass 107 bytes) raised an OSError traceback from `ray.init`: it is one line now, exit 2.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

from probes.result import InputError
from runner.hosts.nodes import connect
from runner.log import logger


def interrupted_once(run: Callable[[], int]) -> int:
    """`run()`, with Ctrl-C handled once (see the module's docstring)."""
    if threading.current_thread() is not threading.main_thread():
        return run()  # signal handlers belong to the main thread
    previous = signal.signal(signal.SIGINT, _first_interrupt)
    try:
        return run()
    except KeyboardInterrupt:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # until the process exits: nothing interrupts the cleanup
        shutdown_ray()
        raise
    finally:
        if signal.getsignal(signal.SIGINT) is _first_interrupt:
            signal.signal(signal.SIGINT, previous)


def _first_interrupt(signum, frame) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # before raising: a second Ctrl-C finds it ignored
    raise KeyboardInterrupt


def shutdown_ray() -> None:
    """Shut down this driver's Ray (the embedded one stops its raylet and GCS with it)."""
    if "ray" not in sys.modules:
        return
    import ray

    try:
        if ray.is_initialized():
            ray.shutdown()
    except Exception as exc:  # shutting down after an interrupt or a failed start: say so, never a traceback
        logger.warning(f"labprobe: Ray did not shut down cleanly: {exc}")


def connect_or_one_line(address: str | None, timeout_s: float) -> None:
    """`connect`, with a temporary folder Ray cannot use as an InputError (one line, exit 2)."""
    try:
        connect(address, timeout_s=timeout_s)
    except OSError as exc:
        shutdown_ray()
        where = exc.filename or os.environ.get("TMPDIR") or "/tmp"
        raise InputError(
            f"Ray could not start: {exc.strerror or exc}: {where} (TMPDIR={os.environ.get('TMPDIR', '')!r}: "
            f"Ray needs a writable folder there; RAY_TMPDIR overrides it for Ray alone)"
        ) from None
