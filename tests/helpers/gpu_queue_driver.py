"""Sweeps driven in their own process against a test's Ray head, each job function wrapped to record where
and when it ran (the GPU queue tests: tests/runner/dispatch/test_gpu_queue.py).

    python gpu_queue_driver.py ADDRESS

One process for a test module: it joins the head once, then runs one sweep for each JSON line on stdin,
`{"cluster": ..., "plan": ..., "store": ..., "wait_s": ..., "calls": ..., "hold_s": ..., "checkpoint": ...}`,
and answers each
with one line `RESULT {"ok": n, "failed": n, "skipped": n}` (or `RESULT {"error": traceback}`) on stdout.
Each sweep is a run_sweep of its own (its own Dispatch, placer and launcher), as a `labprobe sweep` would run
it; only Ray's connection and idle CPU workers (the fingerprint and GPU-reading tasks) carry over. GPU jobs
still take a fresh worker each (max_calls=1).

Each job runs the stand-in probe (tests/helpers/standin: it reads the checkpoint's config) in place of its own, on
the small model at CHECKPOINT (what is under test is where and when it runs, and what its row records), through the
real `execute` (the guard, the CUDA check, the host's versions); then its worker holds
its card HOLD_S more seconds (the first job only when HOLD_S is negative: -HOLD_S). It writes
CALLS/<uuid>.json per job (probe, status, CUDA_VISIBLE_DEVICES, Ray's GPU ids, start, end). The first time
the sweep's placement finds no idle card on a host (GpuPlacer.refused: the host's wait for a foreign
process starts), it writes that time.time() to CALLS/../first-refusal, for a test that frees a card some
seconds into that wait. This script is shipped to the workers by value (it runs as __main__).
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
import traceback
from pathlib import Path

import ray

from runner.clock import new_run_id
from runner.dispatch.launch import RayLauncher, execute
from runner.dispatch.placement import GpuPlacer
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store


def wrapped(calls: Path, hold_s: float, checkpoint: str):
    def run(job, **kwargs):
        import os
        import time
        import uuid

        t0 = time.time()
        first = not any(calls.glob("*.json")) and not any(calls.glob("*.started"))
        (calls / f"{uuid.uuid4().hex}.started").write_text("")
        cheap = dataclasses.replace(job, probe="standin", config={}, paths={**job.paths, "checkpoint": checkpoint})
        outcome = execute(cheap, **kwargs)
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


_refused = GpuPlacer.refused
_marker: list[Path] = []


def refused(self, host, reason, **kwargs):
    """GpuPlacer.refused, noting the first refusal's time (see the module docstring)."""
    if _marker and not _marker[0].exists():
        tmp = _marker[0].with_suffix(".tmp")
        tmp.write_text(repr(time.time()))
        tmp.replace(_marker[0])
    return _refused(self, host, reason, **kwargs)


GpuPlacer.refused = refused


def sweep(request: dict) -> dict:
    calls = Path(request["calls"])
    _marker[:] = [calls.parent / "first-refusal"]
    cluster = load_cluster(request["cluster"])
    counts = run_sweep(
        cluster=cluster,
        store=Store(request["store"]),
        plan=request["plan"],
        jobs=expand(cluster, request["plan"]),
        run_id=new_run_id(),
        gpu_wait_s=float(request["wait_s"]),
        progress=False,
        gpu_backoff_s=(0.5,),
        launcher=RayLauncher(fn=wrapped(calls, float(request["hold_s"]), request["checkpoint"])),
    )
    return {"ok": counts.ok, "failed": counts.failed, "skipped": counts.skipped}


def main() -> None:
    ray.init(address=sys.argv[1], log_to_driver=False, include_dashboard=False)
    print("RESULT {}", flush=True)  # joined: ready for sweeps
    for line in sys.stdin:
        try:
            answer = sweep(json.loads(line))
        except Exception:
            answer = {"error": traceback.format_exc()}
        print("RESULT " + json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
