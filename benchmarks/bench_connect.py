"""How long `labprobe sweep` and `labprobe idle` take to give up on a Ray address where no usable head
answers (issue: they must end within 90 s, one line, exit 2).

    PYTHONPATH=. python benchmarks/bench_connect.py [--cluster cluster.yaml] [--json OUT]

Cases, each a fresh `python -m runner.cli` process (imports included, as a user sees it): a free port
(nothing listens), a socket that accepts and never answers (default --connect-timeout-s), and an
address without a port number. Prints one row per case: wall seconds, exit code, the stderr line.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def timed(args: list[str]) -> dict:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "runner.cli", *args], capture_output=True, text=True, timeout=900)
    return {
        "args": " ".join(args),
        "wall_s": round(time.monotonic() - t0, 1),
        "rc": proc.returncode,
        "stderr_lines": len(proc.stderr.strip().splitlines()),
        "stderr": proc.stderr.strip()[-300:],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster", default="cluster.yaml")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    store = tempfile.mkdtemp(prefix="bench-connect-")
    base = ["--cluster", args.cluster]
    rows = [
        timed(["sweep", *base, "--store", store, "--address", f"127.0.0.1:{free_port()}"]),
        timed(["idle", *base, "--address", f"127.0.0.1:{free_port()}"]),
    ]
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        rows.append(timed(["sweep", *base, "--store", store, "--address", f"127.0.0.1:{silent.getsockname()[1]}"]))
    rows.append(timed(["sweep", *base, "--store", store, "--address", "127.0.0.1:notaport"]))
    for row in rows:
        print(
            f"{row['wall_s']:6.1f} s  rc {row['rc']}  lines {row['stderr_lines']}  {row['args']}\n         {row['stderr']}"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
