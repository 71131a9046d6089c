"""Node churn under load: 200 CPU jobs over two hosts while one host's node is killed and restarted twice.

    python benchmarks/node_churn.py [--jobs 200] [--kill-at 0.25 0.55]

A real cluster on this machine: a head (no host label, the driver's node) and two nodes started by
`ray start --address ... --block` (hosts `churn-a`, `churn-b`, one CPU each; private ports and temp dir,
every process stopped by pid). The plan: --jobs `mask` jobs of a two-layer Qwen3 config, half on each
host. `labprobe sweep --address` runs it; when the sweep has stored each --kill-at fraction of the jobs,
churn-b's node is SIGKILLed and a new node started for it 3 s later. Then `labprobe sweep` again (the
rerun: it runs only what the store does not hold ok). Prints, and checks:
- nothing lost: every planned job is in the store, ok after the rerun;
- nothing duplicated: no job stored ok twice, no run storing a job twice;
- every job ok after at most one rerun; how long each kill took to fail churn-b's jobs (from the kill
  to the newest failed row stored after it), the sweeps' walls.
Exit 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "helpers"))
sys.path.insert(0, str(REPO))

from ray_head import RayHead, RayNode  # noqa: E402  (the tests' own start/stop-by-pid helpers)
from sweep_util import tiny_qwen3  # noqa: E402

from runner.store.store import Store  # noqa: E402

HOSTS = ("churn-a", "churn-b")
PROGRESS = re.compile(r"\[(\d+)/(\d+) ")
"""The sweep's per-job log line (not a terminal): `[12/200   3.1s] ok ...`."""


def env() -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "LABPROBE_"))}
    return {**base, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}


def write_lab(folder: Path, num_jobs: int) -> Path:
    tiny_qwen3(folder / "ckpt" / "tiny")
    per_host = num_jobs // len(HOSTS)
    plan = [
        {"probe": "mask", "hosts": [host], "checkpoints": ["tiny"], "config": {"seq_len": 32 + n}}
        for host in HOSTS
        for n in range(per_host)
    ]
    data = {
        "store": {"root": "store"},
        "hosts": [{"name": h, "address": "127.0.0.1", "checkpoints_root": str(folder / "ckpt")} for h in HOSTS],
        "checkpoints": [{"name": "tiny", "path": "tiny", "weights": "random"}],
        "plans": {"churn": plan},
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def sweep(lab: Path, address: str, store: Path, kill_at: list[int], churn) -> tuple[int, float, list[float]]:
    """One `labprobe sweep`; `churn()` runs (in a thread) when its stored-job count reaches each of kill_at.
    -> (exit code, wall, the kills' times)."""
    cmd = [sys.executable, "-m", "runner.cli", "sweep", "--cluster", str(lab), "--plan", "churn"]
    cmd += ["--address", address, "--store", str(store)]
    t0 = time.time()
    proc = subprocess.Popen(cmd, env=env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out_lines: list[str] = []
    reader = threading.Thread(target=lambda: out_lines.extend(proc.stdout), daemon=True)
    reader.start()
    kills: list[float] = []
    threads = []
    left = sorted(kill_at)
    for line in proc.stderr:  # not a terminal: one log line per stored job, `[n/total ...]`
        progress = PROGRESS.search(line)
        if left and progress:
            if int(progress.group(1)) >= left[0]:
                left.pop(0)
                kills.append(time.time())
                threads.append(threading.Thread(target=churn))
                threads[-1].start()
    proc.wait(timeout=1800)
    reader.join(10)
    for t in threads:
        t.join(120)
    print("".join(out_lines).splitlines()[0] if out_lines else "(no summary)")
    return proc.returncode, time.time() - t0, kills


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--kill-at", type=float, nargs="+", default=[0.25, 0.55])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="lp-churn-"))
    lab = write_lab(folder, args.jobs)
    head = RayHead(env=env(), num_cpus=1)
    nodes = {h: RayNode(head, env=env(), labels=f"labprobe.host={h}", num_cpus=1) for h in HOSTS}
    restarts: list[float] = []

    def churn() -> None:  # churn-b's node killed, a new one started in its place 3 s later
        nodes["churn-b"].kill()
        time.sleep(3.0)
        nodes["churn-b"] = RayNode(head, env=env(), labels="labprobe.host=churn-b", num_cpus=1)
        restarts.append(time.time())

    store = folder / "store"
    try:
        code1, wall1, kills = sweep(lab, head.address, store, [round(f * args.jobs) for f in args.kill_at], churn)
        code2, wall2, _ = sweep(lab, head.address, store, [], churn)
    finally:
        for node in nodes.values():
            node.kill()
        head.kill()
    jobs = Store(store).jobs(columns=["run_id", "job_id", "host", "status", "reason", "finished_at"])
    runs = sorted(jobs["run_id"].unique())
    first = jobs[jobs["run_id"] == runs[0]]
    ok = jobs[jobs["status"] == "ok"]
    ok_twice = [j for j, n in Counter(ok["job_id"]).items() if n > 1]
    per_run_twice = [k for k, n in Counter(zip(jobs["run_id"], jobs["job_id"])).items() if n > 1]
    fail_s = []
    for t in kills:
        after = first[(first["status"] == "failed") & (first["finished_at"].map(lambda x: x.timestamp()) >= t)]
        if len(after):
            fail_s.append(round(after["finished_at"].max().timestamp() - t, 1))
    figures = {
        "jobs": args.jobs,
        "sweep1": {"exit": code1, "wall_s": round(wall1, 1), **Counter(first["status"])},
        "kills_at_stored": [round(f * args.jobs) for f in args.kill_at],
        "kill_to_last_failed_row_s": fail_s,
        "failed_reasons": sorted(Counter(first[first["status"] == "failed"]["reason"]).items()),
        "rerun": {"exit": code2, "wall_s": round(wall2, 1), **Counter(jobs[jobs["run_id"] == runs[-1]]["status"])},
        "distinct_jobs_ok": int(ok["job_id"].nunique()),
        "jobs_ok_twice": len(ok_twice),
        "jobs_stored_twice_in_one_run": len(per_run_twice),
        "runs": len(runs),
    }
    print(json.dumps(figures, indent=1, default=str))
    good = figures["distinct_jobs_ok"] == args.jobs and not ok_twice and not per_run_twice and code2 == 0
    print("PASS" if good and len(runs) == 2 else "FAIL")
    return 0 if good and len(runs) == 2 else 1


if __name__ == "__main__":
    sys.exit(main())
