"""The simulated lab of benchmarks/bench_store.py: its history, built through the store's writer,
and tonight's plan.

Each of 20 hosts x 10 checkpoint names holds a new checkpoint (a new fingerprint, so new job ids)
every night; every 100th job of a night fails and reruns under its job id the next night. Tonight's
plan: one checkpoint name more, all new checkpoints, and last night's failed jobs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from runner.lab.plan import job_id
from runner.store.store import JobKey, Store, job_record, table_records

ENV = {
    "python": "3.11.7",
    "torch": "2.13.0+cu130",
    "transformers": "5.24.0",
    "peft": "0.21.0",
    "cuda": "13.0",
    "driver": "580.159.04",
    "gpu": "NVIDIA H200",
    "code_version": "0.3.0+g1a2b3c4",
    "node_host": "gx10",
    "hostname": "gx10.lab.example",
    "cpu": "AMD EPYC 9354 32-Core Processor",
    "ram_gib": 503.4,
}
CONFIG_HASH = "5e1f" * 4
CONFIG = {
    "checkpoint": "/models/qwen3-4b-base",
    "seq_len": 4096,
    "batch_size": 4,
    "lora_rank": 32,
    "lora_alpha": 64.0,
    "steps": 20,
    "warmup": 3,
    "precision": "bf16",
    "harness": "mytrainer.train",
}
T0 = datetime.now(timezone.utc).replace(hour=1, minute=0, second=0, microsecond=0) - timedelta(days=731)
"""The first simulated night: two years ago, so the second year ends today (the log retention works
on file dates)."""


def night_keys(night: int, hosts: int, checkpoints: int, salt: str = "") -> list[tuple[JobKey, bool]]:
    """(key, failed) of one night's new jobs: each checkpoint name a new checkpoint (fingerprint)."""
    run_id = (T0 + timedelta(days=night)).strftime("%Y%m%dT%H%M%SZ") + f"-{night:04x}"
    out = []
    for h in range(hosts):
        for c in range(checkpoints):
            n = h * checkpoints + c
            fp = hashlib.sha256(f"ckpt{c:02d}@{night}{salt}".encode()).hexdigest()[:16]
            key = JobKey(
                run_id=run_id,
                job_id=job_id("carrier", CONFIG_HASH, fp, f"host{h:02d}", f"ckpt{c:02d}"),
                probe="carrier",
                host=f"host{h:02d}",
                checkpoint=f"ckpt{c:02d}",
                checkpoint_fp=fp,
                config_hash=CONFIG_HASH,
                code_version="0.3.0+g1a2b3c4",
                finished_at=T0 + timedelta(days=night, seconds=n * 20),
            )
            out.append((key, n % 100 == night % 100))
    return out


def night_records(night: int, hosts: int, checkpoints: int) -> tuple[list[dict], list[dict]]:
    """(carrier rows, job rows) of one night's sweep: its new jobs, then last night's failed ones rerun."""
    keys = night_keys(night, hosts, checkpoints)
    if night > 0:
        later = timedelta(seconds=len(keys) * 20)
        keys += [
            (
                dataclasses.replace(k, run_id=keys[0][0].run_id, finished_at=k.finished_at + timedelta(days=1) + later),
                False,
            )
            for k, failed in night_keys(night - 1, hosts, checkpoints)
            if failed
        ]
    rows, jobs = [], []
    for key, failed in keys:
        h = int(key.host[4:])
        jobs.append(
            job_record(
                key,
                status="failed" if failed else "ok",
                reason="CUDA error: out of memory" if failed else "",
                started_at=key.finished_at - timedelta(seconds=18),
                wall_s=18.0,
                summary={} if failed else {"tok_per_s": 9000.0 + h, "step_s": 1.8, "mfu": 0.41},
                config=CONFIG,
                env=ENV,
                plan="nightly",
            )
        )
        if not failed:
            rows += table_records(
                key,
                [
                    {
                        "seq_len": s,
                        "step_s": 0.9 * s / 4096 * (1 + h / 100),
                        "tok_per_s": 4 * s / (0.9 * s / 4096),
                        "peak_mem_bytes": 40 * 2**30 + s,
                        "mfu": 0.41,
                        "step_spread_pct": 0.6,
                        "params_total": 4_022_468_096,
                        "params_trainable": 33_030_144,
                    }
                    for s in (2048, 4096)
                ],
            )
    return rows, jobs


def build(store: Store, first: int, nights: int, hosts: int, checkpoints: int) -> float:
    t0 = time.perf_counter()
    for night in range(first, first + nights):
        started = time.time()
        rows, jobs = night_records(night, hosts, checkpoints)
        store.write_rows("carrier.carriers", rows)
        store.write_rows("jobs", jobs)  # last, as a sweep commits each job's row after its tables
        store.compact()
        age_log(store, started, T0 + timedelta(days=night))
        if night % 30 == 29:
            from runner.store.maintain import vacuum

            vacuum(store, 0)
        if night % 73 == 72:
            print(f"  night {night + 1}: {time.perf_counter() - t0:.0f} s", flush=True)
    return time.perf_counter() - t0


def age_log(store: Store, since: float, when: datetime) -> None:
    """Date the log files this night wrote to its simulated date, so the log retention (7 days) drops
    old ones as it would over a real year: every commit lists the log, its size is part of the cost."""
    stamp = when.timestamp()
    for folder in (store.root / "tables").glob("*/_delta_log"):
        for path in folder.iterdir():
            if path.stat().st_mtime >= since and path.name != "_last_checkpoint":
                os.utime(path, (stamp, stamp))


def log_files(root: Path) -> int:
    return len(list((root / "tables" / "jobs" / "_delta_log").iterdir()))


def tonight(root: Path, night: int, hosts: int, checkpoints: int, stored: int = 40) -> list[str]:
    """Tonight's plan (job ids): 20 hosts x one checkpoint name more than the history's, each a new
    checkpoint, and last night's failed jobs; `stored` of them stored per job first, ok, as by a
    sweep earlier tonight that stopped."""
    keys = [k for k, _ in night_keys(night, hosts, checkpoints + 1, salt="-tonight")]
    reruns = [k.job_id for k, failed in night_keys(night - 1, hosts, checkpoints) if failed]
    store = Store(root)
    for key in keys[:stored]:
        key = dataclasses.replace(key, run_id=key.run_id + "-tonight")
        store.write_table(key, "carriers", [{"seq_len": 4096, "step_s": 0.9}])
        store.write_job(
            key,
            status="ok",
            started_at=key.finished_at,
            wall_s=18.0,
            summary={},
            config=CONFIG,
            env=ENV,
            plan="nightly",
        )
    return [k.job_id for k in keys] + reruns
