"""GPU placement in the sweep, on a node with one logical GPU whose idleness comes from fake NVML
readings (`$LABPROBE_FAKE_NVML_DIR/<host>.json`, rewritten by the test): a job waits while the card
reads busy, waits on its card when it turned busy between placement and start, and is skipped with
the reason at the deadline.

The placed job runs the cheap `mask` probe in place of `profile` (the wrapper below): what is under
test is where and when it starts; the GPU probes' own measurements are tested in tests/probes. The
wrapper turns on runner.gpu.cuda's test seam (LABPROBE_FAKE_CUDA=1) in its worker: torch there is
taken to see the fake card Ray assigned, as CUDA would on a GPU host.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
from sweep_util import write_cluster

from runner.clock import new_run_id
from runner.dispatch.launch import RayLauncher
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store

HOST = "gpuhost"
GIB = 1024**3
IDLE = [{"index": 0, "name": "Fake H200", "uuid": "GPU-fake-0", "mem_used_bytes": 0, "util_pct": [0.0, 0.0]}]
BUSY = [
    {
        "index": 0,
        "name": "Fake H200",
        "uuid": "GPU-fake-0",
        "mem_used_bytes": 40 * GIB,
        "util_pct": [97.0, 99.0],
        "processes": [{"pid": 424242, "mem_used_bytes": 40 * GIB}],
    }
]
PLANS = {"gpu": [{"probe": "profile", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"]}]}


@pytest.fixture(scope="module")
def gpu_lab(tmp_path_factory, ray_cluster):
    path = write_cluster(tmp_path_factory.mktemp("lab"), PLANS, extra_hosts=[{"name": HOST, "gpus": 1}])
    node = ray_cluster.add_node(num_cpus=1, num_gpus=1, labels={"labprobe.host": HOST})
    ray_cluster.wait_for_nodes()
    yield path
    ray_cluster.remove_node(node)


def set_card(fake_nvml_dir: Path, gpus: list[dict]) -> None:
    tmp = fake_nvml_dir / f".{HOST}.json.tmp"
    tmp.write_text(json.dumps(gpus))
    tmp.replace(fake_nvml_dir / f"{HOST}.json")  # atomic: a reader never sees half a reading


def recording_job(calls: Path, fake_dir: Path, *, turn_busy_first: bool = False):
    """The job function: records each start (its GPU ids, its outcome); with `turn_busy_first`, the
    first start flips the card busy just before the job's own idleness check (a training run that
    grabbed the card between placement and start), and idle again 2 s later."""

    def run(job, **kwargs):
        import json as json_
        import os
        import threading

        import ray

        from runner.dispatch.launch import execute

        os.environ["LABPROBE_FAKE_CUDA"] = "1"  # the seam: this worker's torch "sees" the fake card
        num = len(list(calls.glob("*.json")))
        if turn_busy_first and num == 0:
            set_card(fake_dir, BUSY)
            threading.Timer(2.0, set_card, (fake_dir, IDLE)).start()
        cheap = dataclasses.replace(job, probe="mask", config={"seq_len": 64})
        outcome = execute(cheap, **kwargs)
        (calls / f"{num}.json").write_text(
            json_.dumps(
                {
                    "status": outcome.status,
                    "reason": outcome.reason,
                    "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                    "cuda_visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "t": time.time(),
                }
            )
        )
        return outcome

    return run


def sweep(lab: Path, store: Path, fn, deadline: float) -> object:
    cluster = load_cluster(lab)
    return run_sweep(
        cluster=cluster,
        store=Store(store),
        plan="gpu",
        jobs=expand(cluster, "gpu"),
        run_id=new_run_id(),
        deadline=deadline,
        progress=False,
        gpu_backoff_s=(0.3,),
        launcher=RayLauncher(fn=fn),
    )


def starts(calls: Path) -> list[dict]:
    return [json.loads((calls / f"{i}.json").read_text()) for i in range(len(list(calls.glob("*.json"))))]


def test_gpu_job_waits_while_the_card_is_busy_then_runs_with_one_gpu(gpu_lab, fake_nvml_dir, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    set_card(fake_nvml_dir, BUSY)
    freed = {}

    def free_later():
        time.sleep(2.0)
        freed["t"] = time.time()
        set_card(fake_nvml_dir, IDLE)

    threading.Thread(target=free_later).start()
    counts = sweep(gpu_lab, tmp_path / "store", recording_job(calls, fake_nvml_dir), time.time() + 60)
    assert (counts.ok, counts.failed, counts.skipped) == (1, 0, 0)
    [start] = starts(calls)
    assert start["t"] >= freed["t"]  # never started while the card read busy
    assert start["status"] == "ok" and len(start["gpu_ids"]) == 1  # it took num_gpus=1 on that node
    job = Store(tmp_path / "store").jobs().iloc[0]
    assert (job["probe"], job["host"], job["status"]) == ("profile", HOST, "ok")


def test_a_job_whose_card_turned_busy_at_start_waits_on_it_then_runs(gpu_lab, fake_nvml_dir, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    set_card(fake_nvml_dir, IDLE)
    counts = sweep(
        gpu_lab, tmp_path / "store", recording_job(calls, fake_nvml_dir, turn_busy_first=True), time.time() + 60
    )
    [start] = starts(calls)
    assert start["status"] == "ok" and start["cuda_visible"] == start["gpu_ids"][0]  # on Ray's card, as Ray set it
    assert (counts.ok, counts.failed, counts.skipped) == (1, 0, 0)
    [job] = Store(tmp_path / "store").jobs().to_dict("records")
    env = json.loads(job["env_json"])
    assert job["status"] == "ok" and (env["gpu_index"], env["gpu_uuid"]) == ("0", "GPU-fake-0")
    assert float(env["gpu_wait_s"]) >= 1.0 and "pid 424242" in env["gpu_wait_reason"], env
    [(_, status, waited, why, card)] = counts.gpu_waits  # what the summary prints
    assert status == "ok" and waited >= 1.0 and "pid 424242" in why and card == "GPU 0 (GPU-fake-0)"


def test_a_gpu_job_with_no_idle_card_is_skipped_at_the_deadline(gpu_lab, fake_nvml_dir, tmp_path):
    calls = tmp_path / "calls"
    calls.mkdir()
    set_card(fake_nvml_dir, BUSY)
    t0 = time.monotonic()
    # 5 s: the sweep fingerprints the jobs on a Ray task first; on a slow machine a shorter deadline could pass
    # before the card was read even once, and the reason would have no card to name
    counts = sweep(gpu_lab, tmp_path / "store", recording_job(calls, fake_nvml_dir), time.time() + 5.0)
    assert time.monotonic() - t0 < 18
    assert (counts.ok, counts.failed, counts.skipped) == (0, 0, 1)
    assert starts(calls) == []  # it never started on the busy card
    job = Store(tmp_path / "store").jobs().iloc[0]
    assert job["status"] == "skipped"
    assert "deadline" in job["reason"] and HOST in job["reason"] and "pid 424242" in job["reason"], job["reason"]


def test_a_gpu_host_whose_ray_node_has_no_gpu_fails_at_once(gpu_lab, tmp_path):
    import yaml

    data = yaml.safe_load(gpu_lab.read_text())
    data["hosts"][0]["gpus"] = 1  # cluster.yaml says gx10 has a GPU; its Ray node was started without one
    data["plans"] = {"gpu": [{"probe": "profile", "hosts": ["gx10"], "checkpoints": ["qwen3-0.6b-base"]}]}
    path = gpu_lab.parent / "no-gpu-node.yaml"
    path.write_text(yaml.safe_dump(data))
    t0 = time.monotonic()
    counts = sweep(path, tmp_path / "store", recording_job(tmp_path, tmp_path), time.time() + 60)
    assert time.monotonic() - t0 < 10
    assert (counts.ok, counts.failed, counts.skipped) == (0, 1, 0)
    assert "gx10: its Ray node offers no GPU" in Store(tmp_path / "store").jobs().iloc[0]["reason"]


def interval_job(calls: Path, *, gpu_s: float, cpu_s: float):
    """The job function for the scheduling tests: no probe, only when and in which process each job
    ran (a stand-in outcome, `skipped`, so nothing needs a result)."""

    def run(job, **kwargs):
        import json as json_
        import os
        import uuid

        from runner.dispatch.launch import Outcome

        t0 = time.time()
        time.sleep(gpu_s if job.gpu else cpu_s)
        (calls / f"{uuid.uuid4().hex}.json").write_text(
            json_.dumps({"gpu": job.gpu, "start": t0, "end": time.time(), "pid": os.getpid()})
        )
        return Outcome(status="skipped", reason="stand-in: scheduling test")

    return run


def scheduled(gpu_lab: Path, tmp_path: Path, plans: dict, fn) -> tuple[object, list[dict]]:
    import yaml

    data = yaml.safe_load(gpu_lab.read_text())
    data["plans"] = plans
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    counts = sweep(path, tmp_path / "store", fn, time.time() + 60)
    return counts, [json.loads(p.read_text()) for p in (tmp_path / "calls").glob("*.json")]


def test_each_gpu_job_gets_a_fresh_worker_process(gpu_lab, fake_nvml_dir, tmp_path):
    (tmp_path / "calls").mkdir()
    set_card(fake_nvml_dir, IDLE)
    plans = {
        "gpu": [
            {"probe": "profile", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": n}}
            for n in (5, 6, 7)
        ]
    }
    counts, runs = scheduled(gpu_lab, tmp_path, plans, interval_job(tmp_path / "calls", gpu_s=0.0, cpu_s=0.0))
    assert counts.skipped == 3 and len(runs) == 3
    # A reused worker would carry the last job's CUDA context and cached memory into the next.
    assert len({r["pid"] for r in runs}) == 3, runs


def test_a_hosts_cpu_jobs_never_run_beside_its_gpu_job(gpu_lab, fake_nvml_dir, tmp_path):
    (tmp_path / "calls").mkdir()
    set_card(fake_nvml_dir, IDLE)
    plans = {
        "gpu": [
            {"probe": "mask", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"], "config": {"seq_len": 64 + n}}
            for n in range(4)
        ]
        + [
            {"probe": "profile", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": n}}
            for n in (5, 6)
        ]
    }
    counts, runs = scheduled(gpu_lab, tmp_path, plans, interval_job(tmp_path / "calls", gpu_s=1.0, cpu_s=0.3))
    assert counts.skipped == 6 and len(runs) == 6
    gpu = [r for r in runs if r["gpu"]]
    for g in gpu:  # the node has a free CPU for them (GPU tasks take none): only the dispatch holds them
        beside = [r for r in runs if r is not g and r["start"] < g["end"] and r["end"] > g["start"]]
        assert not beside, f"ran beside a GPU job: {beside}"


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_a_timed_out_gpu_job_keeps_its_host_busy_until_its_worker_is_gone(gpu_lab, tmp_path):
    """A force-cancel kills the worker asynchronously; on a multi-GPU host Ray would start the next GPU
    job on another card beside the dying one, so the host stays busy until the worker is gone."""
    pid_file = tmp_path / "pid"

    def hang(job, **kwargs):
        import os

        pid_file.write_text(str(os.getpid()))
        time.sleep(60)

    launcher = RayLauncher(fn=hang)
    [job] = expand(load_cluster(gpu_lab), "gpu")
    launcher.submit(job, deadline=None)
    t0 = time.monotonic()
    while not pid_file.exists():
        assert time.monotonic() - t0 < 60, "the GPU job never started"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    [(expired, outcome)] = launcher.expire(0.0)
    assert expired is job and outcome.reason.startswith("timeout") and launcher.in_flight() == {}
    assert launcher.gpu_hosts() == {HOST}  # cancelled, not yet known gone: no next GPU job here
    while launcher.gpu_hosts():
        assert time.monotonic() - t0 < 60, "the cancelled job's host never became free"
        time.sleep(0.05)
    assert not alive(pid)


def test_two_sweeps_never_run_gpu_jobs_on_one_card_at_once(gpu_lab, fake_nvml_dir, tmp_path):
    """Two drivers (two sweeps on different stores) each submit a GPU job to a one-card host: Ray's GPU
    accounting (one GPU a job) makes them take turns, with no resource of labprobe's own."""
    set_card(fake_nvml_dir, IDLE)
    plan = [
        {"probe": "profile", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": n}}
        for n in (5, 6)
    ]
    import yaml

    data = yaml.safe_load(gpu_lab.read_text())
    data["plans"] = {"gpu": plan}
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    (tmp_path / "calls").mkdir()
    fn = interval_job(tmp_path / "calls", gpu_s=1.5, cpu_s=0.0)
    launchers = [RayLauncher(fn=fn), RayLauncher(fn=fn)]
    for launcher, job in zip(launchers, expand(load_cluster(path), "gpu")):
        launcher.submit(job, deadline=None)
    t0 = time.monotonic()
    while any(launcher.in_flight() for launcher in launchers):
        assert time.monotonic() - t0 < 60
        for launcher in launchers:
            launcher.poll(0.1)
    first, second = sorted(
        (json.loads(p.read_text()) for p in (tmp_path / "calls").glob("*.json")), key=lambda r: r["start"]
    )
    assert second["start"] >= first["end"], (first, second)
