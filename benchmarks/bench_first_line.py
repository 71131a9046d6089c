"""How soon `labprobe sweep` shows something on a terminal, and what it shows while it works.

Runs the demo sweep (`labprobe sweep`, no arguments) in a fresh lab folder (cluster.yaml and demo/ of
this checkout, an empty store) under a pseudo-terminal, as a user would see it, and prints each stderr
line with the seconds since start. Criterion (issue 28 item 5): the first line within 1 s.

    python benchmarks/bench_first_line.py
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="labprobe-first-line-") as tmp:
        lab = Path(tmp)
        (lab / "cluster.yaml").write_text((REPO / "cluster.yaml").read_text())
        (lab / "demo").symlink_to(REPO / "demo")
        main_fd, terminal = pty.openpty()
        begin = time.perf_counter()
        proc = subprocess.Popen(
            [str(Path(sys.executable).with_name("labprobe")), "sweep"],
            cwd=lab,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=terminal,
        )
        os.close(terminal)
        first, buffer = None, b""
        while True:
            ready, _, _ = select.select([main_fd], [], [], 1.0)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            now = time.perf_counter() - begin
            first = now if first is None else first
            buffer += chunk
            for line in buffer.decode(errors="replace").replace("\r", "\n").splitlines():
                if line.strip():
                    print(f"{now:6.2f} s  {line.strip()[:110]}")
            buffer = b""
        proc.wait()
    print(f"first line after {first:.2f} s (criterion: 1 s); sweep exit {proc.returncode}")
    return 0 if first is not None and first <= 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
