"""Runner speed: per-job dispatch overhead, 300 short jobs over three nodes vs one, compare at 100k rows.

    python benchmarks/bench_runner.py [--jobs 300] [--work-ms 50] [--rows 100000]

1. Dispatch overhead, warm cluster: N jobs through the real sweep path (plan expansion done, pinned
   Ray task per job, Outcome back, job row + one table written to the store) on ONE host with ONE
   CPU, so jobs run one after another; the job itself does nothing. Overhead per job = wall / N.
   Also the bare pinned-task round trip for reference.
2. Fan-out: 300 short jobs over a head + two nodes (three hosts, one CPU each) against one node
   (one CPU). Two kinds of job: `sleep` (the job waits: what a GPU host's driver-side CPU does while
   its GPU works) and `spin` (the job burns its own CPU). This machine has 2 cores shared by all
   three "nodes": spin jobs cannot go faster than 2x here whatever the runner does, sleep jobs show
   the runner's own fan-out. On hosts with their own cores the spin case behaves like sleep.
3. compare over a store of --rows rows (1,000 jobs x rows/1,000 rows, 2 hosts x 10 checkpoints x
   50 runs): `runner.analysis.compare.compare` wall, in process (store read + pandas), cold and warm.
Prints one line per figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import yaml

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LABEL = "labprobe.host"


def job_fn(mode: str, work_s: float):
    def run(job, **kwargs):
        import time as time_

        from probes.result import ProbeResult
        from runner.dispatch.launch import Outcome

        t0 = time_.perf_counter()
        if mode == "sleep":
            time_.sleep(work_s)
        elif mode == "spin":
            while time_.perf_counter() - t0 < work_s:
                pass
        result = ProbeResult(probe=job.probe, config=job.probe_config(), tables={"t": [{"work_s": work_s}]})
        return Outcome(
            status="ok",
            result=result,
            env={"node_host": job.host},
            checkpoint_fp=job.checkpoint_fp,
            wall_s=time_.perf_counter() - t0,
        )

    return run


def cluster_file(folder: Path, hosts: list[str], num_jobs: int) -> Path:
    """num_jobs mask jobs (distinct configs) spread round-robin over `hosts`, one checkpoint."""
    entries = [
        {"probe": "mask", "hosts": [hosts[i % len(hosts)]], "checkpoints": ["q"], "config": {"seq_len": 64 + i}}
        for i in range(num_jobs)
    ]
    data = {
        "hosts": [{"name": h, "address": "127.0.0.1"} for h in hosts],
        "checkpoints": [{"name": "q", "path": str(REPO / "demo/checkpoints/qwen3-0.6b-base")}],
        "plans": {"p": entries},
    }
    path = folder / f"cluster-{len(hosts)}-{num_jobs}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def sweep_wall(yaml_path: Path, store: Path, fn) -> tuple[float, object]:
    from runner.clock import new_run_id
    from runner.dispatch.launch import RayLauncher
    from runner.dispatch.sweep import run_sweep
    from runner.lab.cluster import load_cluster
    from runner.lab.plan import expand
    from runner.store.store import Store

    cluster = load_cluster(yaml_path)
    jobs = expand(cluster, "p")
    t0 = time.perf_counter()
    counts = run_sweep(
        cluster=cluster,
        store=Store(store),
        plan="p",
        jobs=jobs,
        run_id=new_run_id(),
        launcher=RayLauncher(fn=fn),
        progress=False,
    )
    wall = time.perf_counter() - t0
    assert counts.ok == len(jobs), counts
    return wall, counts


def bench_dispatch(tmp: Path, num_jobs: int) -> None:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1, labels={LABEL: "solo"})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:

        @ray.remote(num_cpus=1)
        def noop():
            return 0

        pinned = noop.options(label_selector={LABEL: "solo"})
        for _ in range(20):
            ray.get(pinned.remote())
        trips = []
        for _ in range(200):
            t0 = time.perf_counter()
            ray.get(pinned.remote())
            trips.append(time.perf_counter() - t0)
        print(f"pinned task round trip (warm): median {statistics.median(trips) * 1e3:.1f} ms")
        path = cluster_file(tmp, ["solo"], num_jobs)
        sweep_wall(path, tmp / "warmup", job_fn("none", 0.0))  # warm the worker (imports) and caches
        wall, _ = sweep_wall(path, tmp / "dispatch", job_fn("none", 0.0))
        print(
            f"dispatch overhead per job (warm, {num_jobs} serial no-op jobs through sweep, store writes "
            f"included): {wall / num_jobs * 1e3:.1f} ms  (target <= 50 ms; sweep wall {wall:.2f} s)"
        )
    finally:
        ray.shutdown()
        cluster.shutdown()


def bench_fanout(tmp: Path, num_jobs: int, work_s: float) -> None:
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False, "labels": {LABEL: "head"}}
    )
    cluster.add_node(num_cpus=1, labels={LABEL: "gx10"})
    cluster.add_node(num_cpus=1, labels={LABEL: "ana-ml2"})
    ray.init(address=cluster.address, log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        for hosts in (["head", "gx10", "ana-ml2"], ["gx10"]):  # warm every node's worker first
            sweep_wall(cluster_file(tmp, hosts, 6), tmp / f"warm-{len(hosts)}", job_fn("none", 0.0))
        for mode in ("sleep", "spin"):
            walls = {}
            for hosts in (["gx10"], ["head", "gx10", "ana-ml2"]):
                path = cluster_file(tmp, hosts, num_jobs)
                walls[len(hosts)], _ = sweep_wall(path, tmp / f"{mode}-{len(hosts)}", job_fn(mode, work_s))
            print(
                f"{num_jobs} x {work_s * 1e3:.0f} ms {mode} jobs: one node {walls[1]:.2f} s, head + two nodes "
                f"{walls[3]:.2f} s, speedup {walls[1] / walls[3]:.2f}x  (ideal {num_jobs * work_s:.1f} s / "
                f"{num_jobs * work_s / 3:.1f} s)"
            )
    finally:
        ray.shutdown()
        cluster.shutdown()


def build_store(root: Path, num_rows: int) -> None:
    from runner.store.store import JobKey, Store

    store = Store(root)
    rows_per_job = num_rows // 1000
    t0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
    env = {"python": "3.11", "torch": "2.13.0", "transformers": "5.24.0", "cuda": "", "driver": "", "gpu": "H200"}
    for run in range(50):
        for host in ("gx10", "ana-ml2"):
            for c in range(10):
                key = JobKey(
                    run_id=f"r{run:03d}",
                    job_id=f"{host}-c{c}",
                    probe="profile",
                    host=host,
                    checkpoint=f"c{c}",
                    checkpoint_fp=f"fp{c}",
                    config_hash="h",
                    code_version="v",
                    finished_at=t0 + timedelta(hours=run),
                )
                scale = 1.0 if host == "gx10" else 1.3
                store.write_table(
                    key,
                    "scaling",
                    [
                        {"seq_len": 64 * (i + 1), "step_s": scale * (c + 1) * (i + 1) * 1e-3, "spread_pct": 0.5}
                        for i in range(rows_per_job)
                    ],
                )
                store.write_job(
                    key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env=env
                )


def bench_compare(tmp: Path, num_rows: int) -> None:
    from runner.analysis.compare import compare
    from runner.store.store import Store

    root = tmp / "big"
    t0 = time.perf_counter()
    build_store(root, num_rows)
    print(f"built a store of {num_rows:,} rows in 1,000 jobs ({time.perf_counter() - t0:.1f} s)")
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        result = compare(Store(root), "profile", host_order=["gx10", "ana-ml2"])
        walls.append(time.perf_counter() - t0)
    assert len(result.rows) == 10 * (num_rows // 1000), len(result.rows)
    print(
        f"compare over {num_rows:,} rows: first {walls[0]:.2f} s, then {min(walls[1:]):.2f} s "
        f"(target <= 2 s; {len(result.rows)} compared rows)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=300)
    parser.add_argument("--work-ms", type=float, default=50.0)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--only", choices=["dispatch", "fanout", "compare"])
    args = parser.parse_args()
    import ray

    print(
        f"python {sys.version.split()[0]}, ray {ray.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        if args.only in (None, "dispatch"):
            bench_dispatch(tmp, 100)
        if args.only in (None, "fanout"):
            bench_fanout(tmp, args.jobs, args.work_ms / 1e3)
        if args.only in (None, "compare"):
            bench_compare(tmp, args.rows)


if __name__ == "__main__":
    main()
