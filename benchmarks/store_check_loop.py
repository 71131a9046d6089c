"""`labprobe store check` run again and again as separate processes: how many abort (exit 134)?

    python benchmarks/store_check_loop.py [--runs 200] [--store D]

Without --store it builds a store shaped like the demo's (a jobs table and eight probe tables, three
jobs' commits each) in a temporary folder. Each run is `python -m runner.cli store check`, from a
folder without a cluster.yaml; the exit codes are counted and printed. Before the fix about 1 run in
15 aborted with "terminate called without an active exception" (docs/store.md says why).
"""

from __future__ import annotations

import argparse
import collections
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(root: Path) -> None:
    from runner.store.store import JobKey, Store

    store = Store(root)
    for n in range(3):
        key = JobKey(
            run_id="r1", job_id=f"j{n}", probe="p", host="h", checkpoint="c", checkpoint_fp="f",
            config_hash="x", code_version="v", finished_at=datetime.now(timezone.utc),
        )  # fmt: skip
        for t in range(8):
            store.write_table(key, f"t{t}", [{"i": i, "s": "x" * 50} for i in range(20)])
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--store", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "store"
        if args.store is None:
            build(store)
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        codes: collections.Counter[int] = collections.Counter()
        start = time.monotonic()
        for _ in range(args.runs):
            argv = [sys.executable, "-m", "runner.cli", "store", "check", "--store", str(store)]
            codes[subprocess.run(argv, cwd=tmp, env=env, capture_output=True, check=False).returncode] += 1
        wall = time.monotonic() - start
    print(f"{args.runs} runs of `labprobe store check` in {wall:.0f} s: exit codes {dict(sorted(codes.items()))}")
    return 0 if set(codes) == {0} else 1


if __name__ == "__main__":
    sys.exit(main())
