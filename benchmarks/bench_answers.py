"""How long the end of a sweep takes to compute its answers on a store of many nights.

Writes NIGHTS nights of 4 hosts x 5 checkpoints x (mask with 36 layer rows, carrier with one row)
through runner.store.store.Store into a temporary folder, then times `answers()` for the last night
(twice: cold, then warm page cache), and the same store's `store.jobs()` alone (the part every reader
pays for with one Parquet file per job).

    PYTHONPATH=. python benchmarks/bench_answers.py [--nights 50]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from runner.analysis.answers import answers
from runner.store.store import JobKey, Store

HOSTS = [f"h{i}" for i in range(4)]
CHECKPOINTS = [f"c{i}" for i in range(5)]
LAYER = {
    "layer_type": "full_attention",
    "mask": "none",
    "is_causal": True,
    "fast_path": True,
    "backend": "flash",
    "window": None,
    "keys_min": 1,
    "keys_max": 1024,
    "band_ok": True,
    "cross_sequence": False,
}


def fill(store: Store, nights: int) -> None:
    for night in range(nights):
        at = datetime(2026, 1, 1, tzinfo=timezone.utc) + timedelta(days=night)
        for host in HOSTS:
            for ckpt in CHECKPOINTS:
                for probe, table, rows in (
                    ("mask", "layers", [{"layer": i, **LAYER} for i in range(36)]),
                    (
                        "carrier",
                        "carriers",
                        [
                            {
                                "model": ckpt,
                                "tok_per_s": random.uniform(1e4, 2e4),
                                "step_s": 0.2,
                                "spread_pct": 0.5,
                                "trustworthy": True,
                                "launch_bound": False,
                            }
                        ],
                    ),
                ):
                    key = JobKey(
                        run_id=f"r{night}",
                        job_id=f"{probe}-{host}-{ckpt}",
                        probe=probe,
                        host=host,
                        checkpoint=ckpt,
                        checkpoint_fp="f",
                        config_hash=probe,
                        code_version="v",
                        finished_at=at,
                    )
                    store.write_table(key, table, rows)
                    store.write_job(
                        key,
                        status="ok",
                        started_at=at,
                        wall_s=1.0,
                        summary={},
                        config={"seq_len": 1024, "padding": "none"},
                        env={},
                    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nights", type=int, default=50)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "results")
        t0 = time.perf_counter()
        fill(store, args.nights)
        num_jobs = args.nights * len(HOSTS) * len(CHECKPOINTS) * 2
        print(f"store: {num_jobs:,} jobs written in {time.perf_counter() - t0:.1f} s")
        for attempt in ("first", "second"):
            t0 = time.perf_counter()
            found = answers(store, f"r{args.nights - 1}", host_order=HOSTS)
            print(
                f"answers ({attempt}): {time.perf_counter() - t0:.2f} s for "
                f"{sum(len(s.answers) for s in found)} answers"
            )
        t0 = time.perf_counter()
        store.jobs()
        print(f"store.jobs() alone: {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
