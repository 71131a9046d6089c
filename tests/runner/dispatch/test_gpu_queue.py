"""The GPU queue on a real multi-node Ray cluster: a head and GPU nodes started by `ray start`, each node's
workers importing the pynvml test double (tests/helpers/nvml_double) as NVML, the way a lab host runs.

- `duo`: two cards (`--num-gpus=2`); `half`: two cards, started `CUDA_VISIBLE_DEVICES=0 --num-gpus=1` (card 1
  kept out of Ray); both with runner.gpu.cuda's test seam on (LABPROBE_FAKE_CUDA=1: torch is taken to see
  the double's card CUDA_VISIBLE_DEVICES names; CI has no CUDA).
- `nocuda`: one card, the seam off: its torch is this machine's, which sees no CUDA device.

Every card a slot, each job on exactly the card Ray assigned, rows recording it; a wait counted from when
a slot was free of our own work; no CPU timing stored as a GPU host's; a node killed just before a sweep
fails its host at once. One cluster for the module; the last test kills the `nocuda` node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nvml_util import DOUBLE_DIR, GIB, SCENARIO_ENV
from ray_head import RayHead, RayNode
from sweep_util import write_cluster

from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).resolve().parents[2] / "helpers" / "gpu_queue_driver.py"
FOREIGN = 4242424
"""Someone's training run on a card (no process here has that pid)."""


def card(host: str, index: int, *, busy: bool = False) -> dict:
    return {
        "name": "NVIDIA H100 80GB HBM3",
        "uuid": f"GPU-{host}-{index}",
        "util": [97] if busy else [0],
        "memory": {"used": 20 * GIB if busy else 0, "total": 80 * GIB},
        "processes": [[FOREIGN, 20 * GIB]] if busy else [],
    }


def play(folder: Path, host: str, cards: list[dict]) -> None:
    """The cards `host`'s double shows from its next nvmlInit on (written atomically)."""
    tmp = folder / f".{host}.tmp"
    tmp.write_text(json.dumps({"devices": cards}))
    tmp.replace(folder / f"{host}.json")


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_", "LABPROBE_", "CUDA_"))}
    return {**env, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", **extra}


def node_env(folder: Path, host: str, *, fake_cuda: bool, **extra: str) -> dict[str, str]:
    pythonpath = os.pathsep.join([str(DOUBLE_DIR), os.environ.get("PYTHONPATH", "")])
    seam = {"LABPROBE_FAKE_CUDA": "1"} if fake_cuda else {}
    return base_env(PYTHONPATH=pythonpath, **{SCENARIO_ENV: str(folder / f"{host}.json")}, **seam, **extra)


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(cluster.yaml, the scenario folder, head, nodes by host)."""
    folder = tmp_path_factory.mktemp("gpu-queue")
    for host, num in (("duo", 2), ("half", 2), ("nocuda", 1)):
        play(folder, host, [card(host, i) for i in range(num)])
    quick = {"window_s": 0.2}
    path = write_cluster(
        folder,
        {},
        extra_hosts=[
            {"name": "duo", "gpus": 2, "idle": quick},
            {"name": "half", "gpus": 1, "idle": quick},
            {"name": "nocuda", "gpus": 1, "idle": quick},
        ],
    )
    head = RayHead(env=base_env(), num_cpus=1)
    nodes: dict[str, RayNode] = {}
    try:
        nodes["duo"] = RayNode(
            head, env=node_env(folder, "duo", fake_cuda=True), labels="labprobe.host=duo", num_gpus=2
        )
        nodes["half"] = RayNode(
            head,
            env=node_env(folder, "half", fake_cuda=True, CUDA_VISIBLE_DEVICES="0"),
            labels="labprobe.host=half",
            num_gpus=1,
        )
        nodes["nocuda"] = RayNode(
            head, env=node_env(folder, "nocuda", fake_cuda=False), labels="labprobe.host=nocuda", num_gpus=1
        )
        yield path, folder, head, nodes
    finally:
        for node in nodes.values():
            node.kill()
        head.kill()


def with_plan(lab_path: Path, folder: Path, plan: list[dict]) -> Path:
    import yaml

    data = yaml.safe_load(lab_path.read_text())
    data["plans"] = {"p": plan}
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def profiles(host: str, num: int) -> list[dict]:
    """`num` GPU jobs on `host` (profile entries differing in steps: distinct jobs)."""
    return [
        {"probe": "profile", "hosts": [host], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": 3 + n}}
        for n in range(num)
    ]


def drive(lab, tmp_path: Path, plan: list[dict], *, wait_s: float, hold_s: float) -> tuple[dict, list[dict]]:
    """The sweep in its own process (tests/helpers/gpu_queue_driver.py): (counts, each job's record)."""
    lab_path, folder, head, _ = lab
    tmp_path.mkdir(exist_ok=True)
    path = with_plan(lab_path, tmp_path, plan)
    calls = tmp_path / "calls"
    calls.mkdir()
    cmd = [sys.executable, str(DRIVER), head.address, str(path), "p", str(tmp_path / "store"), str(wait_s)]
    proc = subprocess.run(
        [*cmd, str(calls), str(hold_s)], env=base_env(), cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    records = sorted((json.loads(p.read_text()) for p in calls.glob("*.json")), key=lambda r: r["start"])
    return counts, records


def rows(store: Path) -> list[dict]:
    out = Store(store).jobs().to_dict("records")
    for row in out:
        row["env"] = json.loads(row["env_json"])
    return out


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_two_idle_cards_run_two_gpu_jobs_at_once_each_on_its_own_card(lab, tmp_path):
    _, folder, _, _ = lab
    play(folder, "duo", [card("duo", 0), card("duo", 1)])
    counts, records = drive(lab, tmp_path, profiles("duo", 2), wait_s=30, hold_s=4)
    assert counts == {"ok": 2, "failed": 0, "skipped": 0}
    first, second = records
    assert overlap(first, second), records  # both cards busy with our jobs at once
    assert sorted(r["cuda_visible"] for r in records) == ["0", "1"]
    for r in records:  # each on the card Ray assigned it, as Ray set it
        assert r["gpu_ids"] == [r["cuda_visible"]] and r["gpu_index"] == r["cuda_visible"], r
    stored = rows(tmp_path / "store")
    assert sorted((r["status"], r["env"]["gpu_index"], r["env"]["gpu_uuid"]) for r in stored) == [
        ("ok", "0", "GPU-duo-0"),
        ("ok", "1", "GPU-duo-1"),
    ]
    assert all(r["env"]["gpu"] == "NVIDIA H100 80GB HBM3" and r["env"]["torch"] for r in stored)


def test_a_busy_card_is_waited_on_never_left_for_the_idle_one(lab, tmp_path):
    """Card 0 holds someone's run, card 1 is idle: Ray hands one job each card; the job on card 1 runs
    there, the job on card 0 waits for the foreign process and is skipped naming it, never moving."""
    _, folder, _, _ = lab
    play(folder, "duo", [card("duo", 0, busy=True), card("duo", 1)])
    counts, records = drive(lab, tmp_path, profiles("duo", 2), wait_s=3, hold_s=5)
    assert counts == {"ok": 1, "failed": 0, "skipped": 1}, records
    ran = [r for r in records if r["status"] == "ok"]
    waited = [r for r in records if r["status"] == "skipped"]
    assert [(r["cuda_visible"], r["gpu_index"]) for r in ran] == [("1", "1")]
    assert [r["cuda_visible"] for r in waited] == ["0"]
    [skipped] = [r for r in rows(tmp_path / "store") if r["status"] == "skipped"]
    assert skipped["reason"].startswith("no idle GPU on duo before the deadline: duo: GPU 0 busy")
    assert f"pid {FOREIGN}" in skipped["reason"] and "GPU 1" not in skipped["reason"]
    assert "waited 3 s on the card Ray gave this job" in skipped["reason"]


def test_a_node_given_card_0_only_waits_for_it_never_runs_on_card_1(lab, tmp_path):
    """`CUDA_VISIBLE_DEVICES=0 ray start --num-gpus=1`: card 1 is someone's own, whatever NVML lists. Card 0
    busy with a foreign run that ends 30 s after the sweep began (it takes ~10 s to read the cards first):
    the job runs on card 0 then, never on card 1, and its row says how long it waited and for what."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0, busy=True), card("half", 1)])
    timer = threading.Timer(30.0, play, (folder, "half", [card("half", 0), card("half", 1)]))
    timer.start()
    try:
        counts, records = drive(lab, tmp_path, profiles("half", 1), wait_s=120, hold_s=0)
    finally:
        timer.cancel()
    assert counts == {"ok": 1, "failed": 0, "skipped": 0}
    assert [(r["cuda_visible"], r["gpu_index"]) for r in records] == [("0", "0")]
    [row] = rows(tmp_path / "store")
    assert (row["env"]["gpu_index"], row["env"]["gpu_uuid"]) == ("0", "GPU-half-0")
    assert float(row["env"]["gpu_wait_s"]) >= 5 and f"pid {FOREIGN}" in row["env"]["gpu_wait_reason"], row["env"]
    assert "GPU 1" not in row["env"]["gpu_wait_reason"]


def test_placement_reads_only_the_cards_a_node_offers_ray(lab, tmp_path):
    """Card 0 (half's only Ray card) busy for good, card 1 (kept out of Ray) idle: no job is placed to wait on
    card 0 one after another; the host's wait runs out once and both jobs are skipped naming card 0."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0, busy=True), card("half", 1)])
    t0 = time.monotonic()
    counts, records = drive(lab, tmp_path, profiles("half", 2), wait_s=3, hold_s=0)
    assert counts == {"ok": 0, "failed": 0, "skipped": 2} and records == [], records  # never started
    for row in rows(tmp_path / "store"):
        assert row["reason"].startswith("no idle GPU on half before the deadline: half: GPU 0 busy"), row["reason"]
        assert f"pid {FOREIGN}" in row["reason"] and "GPU 1" not in row["reason"]
        # the wait ends at the first idleness sample past its bound: 3 s, or 4 on loaded cores; once, not twice
        assert re.search(r"waited [34] s for a foreign process to leave; --gpu-wait-s 3\)", row["reason"]), row
    assert time.monotonic() - t0 < 60


def test_a_job_queued_behind_our_own_is_not_skipped_however_long_that_one_runs(lab, tmp_path):
    """One idle card, two GPU jobs, --gpu-wait-s 30: the first holds the card 33 s; the second waits
    behind it (labprobe's own work, not a foreign process) and runs after it."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0), card("half", 1)])
    counts, records = drive(lab, tmp_path, profiles("half", 2), wait_s=30, hold_s=-33)
    assert counts == {"ok": 2, "failed": 0, "skipped": 0}, records
    first, second = records
    assert first["end"] - first["start"] >= 33 and second["start"] >= first["end"] - 0.5
    assert all(r["cuda_visible"] == "0" for r in records)
    stored = rows(tmp_path / "store")
    assert all(float(r["env"]["gpu_wait_s"]) < 5 for r in stored), [r["env"] for r in stored]


def sweep_cli(lab, tmp_path: Path, plan: list[dict], *extra: str) -> subprocess.Popen:
    lab_path, _, head, _ = lab
    path = with_plan(lab_path, tmp_path, plan)
    cmd = [sys.executable, "-m", "runner.cli", "sweep", "--cluster", str(path), "--plan", "p"]
    cmd += ["--address", head.address, "--store", str(tmp_path / "store"), *extra]
    return subprocess.Popen(cmd, env=base_env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_gpu_job_whose_torch_sees_no_cuda_fails_naming_it(lab, tmp_path):
    proc = sweep_cli(lab, tmp_path, profiles("nocuda", 1), "--gpu-wait-s", "5")
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err[-3000:]
    [row] = rows(tmp_path / "store")
    assert row["status"] == "failed" and row["host"] == "nocuda"
    assert row["reason"].startswith("no usable CUDA device: nocuda: GPU job placed on GPU 0 (GPU-nocuda-0)")
    assert "torch.cuda.is_available() is False" in row["reason"] and "torch.cuda.is_available()" in out


def test_a_node_killed_just_before_the_sweep_fails_its_host_at_once(lab, tmp_path):
    """Ray lists a SIGKILLed node alive for ~15 s; its raylet refuses connections at once: the host fails
    within 20 s, and the other host's jobs run to the end."""
    _, _, _, nodes = lab
    plan = [
        {"probe": "mask", "hosts": [host], "checkpoints": ["qwen3-0.6b-base"], "config": {"seq_len": n}}
        for host in ("duo", "nocuda")
        for n in (64, 96)
    ]
    nodes["nocuda"].kill()
    time.sleep(1.0)
    t0 = time.time()
    proc = sweep_cli(lab, tmp_path, plan)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err[-3000:]
    stored = rows(tmp_path / "store")
    dead = [r for r in stored if r["host"] == "nocuda"]
    assert [r["status"] for r in dead] == ["failed", "failed"] and "nocuda" in dead[0]["reason"], dead
    assert all(r["finished_at"].timestamp() - t0 < 20 for r in dead), [r["finished_at"] for r in dead]
    assert sorted(r["status"] for r in stored if r["host"] == "duo") == ["ok", "ok"]
