"""A sweep driven in its own process against a test's Ray head, each job function wrapped to record where
and when it ran (the GPU queue tests: tests/runner/dispatch/test_gpu_queue.py).

    python gpu_queue_driver.py ADDRESS CLUSTER PLAN STORE GPU_WAIT_S CALLS_DIR HOLD_S

Each job runs the cheap `mask` probe in place of its own (what is under test is where and when it runs,
and what its row records), through the real `execute` (the guard, the CUDA check); then its worker holds
its card HOLD_S more seconds (the first job only when HOLD_S is negative: -HOLD_S). It writes
CALLS_DIR/<uuid>.json per job (probe, status, CUDA_VISIBLE_DEVICES, Ray's GPU ids, start, end) and prints
the run's counts as JSON. This script is shipped to the workers by value (it runs as __main__).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import ray

from runner.clock import new_run_id
from runner.dispatch.launch import RayLauncher, execute
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store


def wrapped(calls: Path, hold_s: float):
    def run(job, **kwargs):
        import os
        import time
        import uuid

        t0 = time.time()
        first = not any(calls.glob("*.json")) and not any(calls.glob("*.started"))
        (calls / f"{uuid.uuid4().hex}.started").write_text("")
        outcome = execute(dataclasses.replace(job, probe="mask", config={"seq_len": 64}), **kwargs)
        if outcome.status == "ok" and (hold_s > 0 or first):
            time.sleep(abs(hold_s))
        record = {
            "probe": job.probe,
            "config": job.config,
            "status": outcome.status,
            "reason": outcome.reason,
            "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "gpu_index": outcome.env.get("gpu_index"),
            "start": t0,
            "end": time.time(),
        }
        (calls / f"{uuid.uuid4().hex}.json").write_text(json.dumps(record))
        return outcome

    return run


def main() -> None:
    address, lab, plan, store, wait_s, calls, hold_s = sys.argv[1:8]
    ray.init(address=address, log_to_driver=False, include_dashboard=False)
    cluster = load_cluster(lab)
    counts = run_sweep(
        cluster=cluster,
        store=Store(store),
        plan=plan,
        jobs=expand(cluster, plan),
        run_id=new_run_id(),
        gpu_wait_s=float(wait_s),
        progress=False,
        gpu_backoff_s=(0.5,),
        launcher=RayLauncher(fn=wrapped(Path(calls), float(hold_s))),
    )
    print(json.dumps({"ok": counts.ok, "failed": counts.failed, "skipped": counts.skipped}))


if __name__ == "__main__":
    main()
