"""Purge beside the store's own chores, N times over: does the store stay sound? (issue 23)

`PYTHONPATH=. RAY_AUTH_MODE=disabled python3 benchmarks/purge_store_loop.py [N=200]`: one runs root
(host `local`, the embedded Ray, runs_quiet_min 0), one store. Each iteration adds a run, then runs
a purge dry run and `purge --yes --plan <its id>`, each with a `store vacuum --retention-days 0`
started beside it from another thread at a random moment (a vacuum that meets the purge's lock is
refused in one line; one that takes the lock first makes the purge wait its turn: refused, then
tried again), and each followed by a `store vacuum --retention-days 0` of its own, which must run;
the purged run is then removed whole (the runs root stays small: the store is what is tested).
Every 25 iterations `store check` runs; at the end `store check` must exit 0 and every table read
back whole. Prints one line of counts and timings: the figures in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import contextlib
import io
import random
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "helpers"))

from purge_util import make_run  # noqa: E402

from runner.chores.plans import newest_plan_id  # noqa: E402
from runner.cli import main  # noqa: E402
from runner.store.store import Store  # noqa: E402


def beside(args: list[str], codes: list[int], rng: random.Random) -> threading.Thread:
    def run() -> None:
        time.sleep(rng.uniform(0, 0.3))
        codes.append(main(args))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def until_not_busy(args: list[str], refused: list[int]) -> int:
    """A purge refused by the lock (exit 2) tried again, as an operator would."""
    for _ in range(50):
        code = main(args)
        if code != 2:
            return code
        refused.append(1)
        time.sleep(0.1)
    raise SystemExit(f"{args}: refused 50 times in a row")


def loop(num: int, tmp: Path) -> dict:
    roots, store = tmp / "runs", tmp / "store"
    cluster = tmp / "cluster.yaml"
    cluster.write_text(
        f"store:\n  root: {store}\nhosts:\n  - name: local\n    address: 127.0.0.1\n    runs_root: {roots}\n"
        "    idle:\n      runs_quiet_min: 0\n"
    )
    rng, vacuums, refused, checks, between = random.Random(23), [], [], [], []
    vacuum = ["store", "vacuum", "--store", str(store), "--retention-days", "0"]
    started = time.perf_counter()
    for i in range(num):
        make_run(roots, f"run-{i:04d}", ckpt_bytes=200)
        thread = beside(vacuum, vacuums, rng)
        assert until_not_busy(["purge", "--cluster", str(cluster)], refused) == 0
        thread.join()
        between.append(until_not_busy(vacuum, refused))
        plan = newest_plan_id(Store(store))
        thread = beside(vacuum, vacuums, rng)
        assert until_not_busy(["purge", "--cluster", str(cluster), "--yes", "--plan", plan], refused) == 0
        thread.join()
        between.append(until_not_busy(vacuum, refused))
        shutil.rmtree(roots / f"run-{i:04d}")
        if (i + 1) % 25 == 0:
            checks.append(main(["store", "check", "--store", str(store)]))
    wall_s = time.perf_counter() - started
    final = main(["store", "check", "--store", str(store)])
    tables = Store(store).table_names()
    rows = {name: len(Store(store).read(name)) for name in tables}  # every live file read back
    left = sorted(p.name for p in roots.glob("*/checkpoints")) + sorted(p.name for p in roots.glob("*/.labprobe-*"))
    return {
        "iterations": num,
        "vacuums_run": vacuums.count(0),
        "vacuums_refused": vacuums.count(2),
        "vacuum_other": len(vacuums) - vacuums.count(0) - vacuums.count(2),
        "vacuums_between_run": between.count(0),
        "vacuums_between_other": len(between) - between.count(0),
        "purges_refused_then_retried": len(refused),
        "checks_every_25": checks,
        "final_check": final,
        "rows_read_back": rows,
        "checkpoints_left": len(left),
        "wall_s": round(wall_s, 1),
    }


if __name__ == "__main__":
    num = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
        result = loop(num, Path(tmp))
    print(result)
    sound = result["final_check"] == 0 and set(result["checks_every_25"]) <= {0} and not result["checkpoints_left"]
    sys.exit(0 if sound and not result["vacuums_between_other"] else 1)
