"""Rebuild tests/data/legacy_store/: a small store in the hive layout labprobe wrote before its
Delta Lake tables (one Parquet file per job per table), written by that code itself: the Store of
commit caf3f1e, loaded from git. `labprobe store migrate` is tested on it.

    python tests/data/make_legacy_store.py     # from the repo root; rewrites tests/data/legacy_store

What it holds: two hosts x two checkpoints of carrier jobs over two nights (the second night one
job failed, one ran again), a mask job with two tables, rows whose column is null in one file and a
float in another, a row column named like a key (`checkpoint` -> `row_checkpoint`), one orphan
table file (its writer died before the job row), artifacts, and stray files (a 0-byte .parquet,
random bytes named .parquet, a notes.txt, a Parquet file of foreign schema) that migrate must skip.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
import types
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
COMMIT = "caf3f1e"


def legacy_store_module() -> types.ModuleType:
    source = subprocess.run(
        ["git", "show", f"{COMMIT}:runner/store/store.py"], cwd=HERE, check=True, capture_output=True, text=True
    ).stdout
    module = types.ModuleType("legacy_store")
    sys.modules["legacy_store"] = module  # dataclasses resolve the module by name
    exec(compile(source, "legacy_store.py", "exec"), module.__dict__)
    return module


@dataclasses.dataclass(frozen=True)
class Cfg:
    seq_len: int = 8


def main() -> None:
    old = legacy_store_module()
    root = HERE / "legacy_store"
    shutil.rmtree(root, ignore_errors=True)
    store = old.Store(root)
    t0 = datetime(2026, 11, 1, 2, 0, tzinfo=timezone.utc)

    def key(job, run, host, ckpt, probe="carrier", minutes=0, night=0):
        return old.JobKey(
            run_id=run,
            job_id=job,
            probe=probe,
            host=host,
            checkpoint=ckpt,
            checkpoint_fp=f"fp-{ckpt}",
            config_hash="c0",
            code_version="0.1.0+gabc",
            finished_at=t0 + timedelta(days=night, minutes=minutes),
        )

    env = {"torch": "2.13.0", "python": "3.11.7", "gpu": "H200"}
    for night, run in enumerate(("20261101T020000Z-aaaa", "20261102T020000Z-bbbb")):
        for i, (host, ckpt) in enumerate([(h, c) for h in ("gx10", "ana-ml2") for c in ("qwen3-0.6b", "gemma-3-4b")]):
            k = key(f"car-{host}-{ckpt}", run, host, ckpt, minutes=i, night=night)
            if night == 1 and host == "ana-ml2" and ckpt == "gemma-3-4b":
                store.write_job(
                    k,
                    status="failed",
                    reason="RuntimeError: CUDA out of memory",
                    started_at=k.finished_at,
                    wall_s=3.0,
                    summary={},
                    config={"seq_len": 8},
                    env=env,
                    plan="nightly",
                )
                continue
            rows = [
                {
                    "seq_len": n,
                    "step_s": 0.1 * (i + 1) + 0.01 * night + n / 1e4,
                    "tok_per_s": n / 0.1,
                    "peak_mem_bytes": 2**30 + i,
                    "checkpoint": f"/models/{ckpt}",
                    "note": None if night == 0 else 1.5,
                }
                for n in (512, 1024)
            ]
            store.write_table(k, "carriers", rows)
            store.write_artifacts(k, {"timings.json": f'{{"night": {night}, "i": {i}}}'})
            store.write_job(
                k,
                status="ok",
                started_at=k.finished_at - timedelta(seconds=5),
                wall_s=5.0 + i,
                summary={"tok_per_s": 1000.0 + i},
                config={"seq_len": 8},
                env=env,
                plan="nightly",
            )
    k = key("mask-gx10", "20261101T020000Z-aaaa", "gx10", "qwen3-0.6b", probe="mask", minutes=9)
    store.write_table(k, "layers", [{"layer": n, "fast_path": n % 2 == 0} for n in range(3)])
    store.write_table(k, "checks", [{"name": "causal", "ok": True}])
    store.write_job(k, status="ok", started_at=k.finished_at, wall_s=0.5, summary={}, config={}, env=env)
    orphan = key("car-orphan", "20261102T020000Z-bbbb", "gx10", "qwen3-0.6b", minutes=30, night=1)
    store.write_table(orphan, "carriers", [{"seq_len": 512, "step_s": 9.9}])  # no job row: never committed
    part = root / "jobs" / "host=gx10" / "checkpoint=qwen3-0.6b"
    (part / "empty.parquet").write_bytes(b"")
    (part / "garbage.parquet").write_bytes(bytes(range(256)) * 4)
    (part / "notes.txt").write_text("moved the gx10 card on Nov 2\n")
    pq.write_table(pa.table({"something": [1, 2], "else": ["a", "b"]}), part / "foreign.parquet")
    pq.write_table(
        pa.table({"x": [1.0]}), root / "carrier.carriers" / "host=gx10" / "checkpoint=qwen3-0.6b" / "foreign.parquet"
    )


if __name__ == "__main__":
    main()
