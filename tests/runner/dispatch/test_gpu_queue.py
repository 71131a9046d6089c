"""The GPU queue on a real multi-node Ray cluster: a head and GPU nodes started by `ray start`, each node's
workers importing the pynvml test double (tests/helpers/nvml_double) as NVML, the way a lab host runs.

- `duo`: two cards (`--num-gpus=2`); `half`: two cards, started `CUDA_VISIBLE_DEVICES=0 --num-gpus=1` (card 1
  kept out of Ray); both with runner.gpu.cuda's test seam on (LABPROBE_FAKE_CUDA=1: torch is taken to see
  the double's card CUDA_VISIBLE_DEVICES names; CI has no CUDA).
- `nocuda`: one card, the seam off: its torch is this machine's, which sees no CUDA device.

Every card a slot, each job on exactly the card Ray assigned, rows recording it; a wait counted from when
a slot was free of our own work; no CPU timing stored as a GPU host's; a node killed just before a sweep
fails its host at once. One cluster for the module, and one driver process running the sweeps of the tests
that wrap the job function (tests/helpers/gpu_queue_driver.py); the last test kills the `nocuda` node.
"""

from __future__ import annotations

import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from nvml_util import DOUBLE_DIR, GIB, SCENARIO_ENV
from ray_head import RayHead, RayNode
from sweep_util import tiny_qwen3, write_cluster

from probes import ENV_PROBES
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
DRIVER = Path(__file__).resolve().parents[2] / "helpers" / "gpu_queue_driver.py"
STANDIN_DIR = DRIVER.parent / "standin"
STANDIN = {ENV_PROBES: "standin_probe"}
"""The wrapped jobs' probe (tests/helpers/standin), registered through the documented hook."""
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
    """The node's workers import the NVML double, and register the jobs' stand-in probe (tests/helpers/standin)."""
    pythonpath = os.pathsep.join([str(DOUBLE_DIR), str(STANDIN_DIR), os.environ.get("PYTHONPATH", "")])
    seam = {"LABPROBE_FAKE_CUDA": "1"} if fake_cuda else {}
    return base_env(PYTHONPATH=pythonpath, **{SCENARIO_ENV: str(folder / f"{host}.json")}, **STANDIN, **seam, **extra)


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
    specs = {
        "duo": (node_env(folder, "duo", fake_cuda=True), 2),
        "half": (node_env(folder, "half", fake_cuda=True, CUDA_VISIBLE_DEVICES="0"), 1),
        "nocuda": (node_env(folder, "nocuda", fake_cuda=False), 1),
    }
    nodes: dict[str, RayNode] = {}
    try:
        # one after another: nodes of one machine joining at once time out looking up their node info
        for host, (env, num_gpus) in specs.items():
            nodes[host] = RayNode(head, env=env, labels=f"labprobe.host={host}", num_gpus=num_gpus)
        yield path, folder, head, nodes
    finally:
        for node in nodes.values():
            node.kill()
        head.kill()


class Driver:
    """tests/helpers/gpu_queue_driver.py, joined to the module's head once: one sweep per `sweep()` call."""

    def __init__(self, address: str, log: Path):
        self.checkpoint = log.parent / "tiny"
        tiny_qwen3(self.checkpoint)  # the model the jobs' cheap stand-in probe runs on
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, str(DRIVER), address],
            # the stand-in's rows are unpickled here: its module on the path, registered as on the nodes
            env=base_env(PYTHONPATH=os.pathsep.join([str(STANDIN_DIR), os.environ.get("PYTHONPATH", "")]), **STANDIN),
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.answers: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._answer(timeout_s=120)  # joined

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                self.answers.put(line[len("RESULT ") :])
        self.answers.put(None)

    def _answer(self, *, timeout_s: float) -> dict:
        try:
            line = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            line = None
        assert line is not None, f"the driver gave no answer: {self.stderr()}"
        answer = json.loads(line)
        assert "error" not in answer, answer["error"] + self.stderr()
        return answer

    def stderr(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()[-3000:]

    def sweep(self, request: dict) -> dict:
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._answer(timeout_s=240)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


@pytest.fixture(scope="module")
def driver(lab, tmp_path_factory):
    _, _, head, _ = lab
    driver = Driver(head.address, tmp_path_factory.mktemp("driver") / "stderr.log")
    yield driver
    driver.close()


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


def drive(
    lab, driver: Driver, tmp_path: Path, plan: list[dict], *, wait_s: float, hold_s: float
) -> tuple[dict, list[dict]]:
    """The sweep in the driver's process (tests/helpers/gpu_queue_driver.py): (counts, each job's record)."""
    lab_path, _, _, _ = lab
    tmp_path.mkdir(exist_ok=True)
    path = with_plan(lab_path, tmp_path, plan)
    calls = tmp_path / "calls"
    calls.mkdir()
    request = {"cluster": str(path), "plan": "p", "store": str(tmp_path / "store"), "wait_s": wait_s}
    counts = driver.sweep({**request, "calls": str(calls), "hold_s": hold_s, "checkpoint": str(driver.checkpoint)})
    records = sorted((json.loads(p.read_text()) for p in calls.glob("*.json")), key=lambda r: r["start"])
    return counts, records


def rows(store: Path) -> list[dict]:
    out = Store(store).jobs().to_dict("records")
    for row in out:
        row["env"] = json.loads(row["env_json"])
    return out


def overlap(a: dict, b: dict) -> bool:
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_two_idle_cards_run_two_gpu_jobs_at_once_each_on_its_own_card(lab, driver, tmp_path):
    _, folder, _, _ = lab
    play(folder, "duo", [card("duo", 0), card("duo", 1)])
    counts, records = drive(lab, driver, tmp_path, profiles("duo", 2), wait_s=30, hold_s=2)
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


def test_a_busy_card_is_waited_on_never_left_for_the_idle_one(lab, driver, tmp_path):
    """Card 0 holds someone's run, card 1 is idle: Ray hands one job each card; the job on card 1 runs
    there, the job on card 0 waits for the foreign process and is skipped naming it, never moving."""
    _, folder, _, _ = lab
    play(folder, "duo", [card("duo", 0, busy=True), card("duo", 1)])
    counts, records = drive(lab, driver, tmp_path, profiles("duo", 2), wait_s=3, hold_s=3)
    assert counts == {"ok": 1, "failed": 0, "skipped": 1}, records
    ran = [r for r in records if r["status"] == "ok"]
    waited = [r for r in records if r["status"] == "skipped"]
    assert [(r["cuda_visible"], r["gpu_index"]) for r in ran] == [("1", "1")]
    assert [r["cuda_visible"] for r in waited] == ["0"]
    [skipped] = [r for r in rows(tmp_path / "store") if r["status"] == "skipped"]
    assert skipped["reason"].startswith("no idle GPU on duo before the deadline: duo: GPU 0 busy")
    assert f"pid {FOREIGN}" in skipped["reason"] and "GPU 1" not in skipped["reason"]
    assert "waited 3 s on the card Ray gave this job" in skipped["reason"]


def free_later(folder: Path, host: str, refused: Path, after_s: float, cards: list[dict]) -> threading.Event:
    """Play `cards` on `host` `after_s` seconds after the sweep's placement first found no idle card there
    (the driver writes that moment to `refused`); set the returned event to call it off."""
    stop = threading.Event()

    def run() -> None:
        while not refused.exists():
            if stop.wait(0.05):
                return
        if not stop.wait(max(0.0, float(refused.read_text()) + after_s - time.time())):
            play(folder, host, cards)

    threading.Thread(target=run, daemon=True).start()
    return stop


def test_a_node_given_card_0_only_waits_for_it_never_runs_on_card_1(lab, driver, tmp_path):
    """`CUDA_VISIBLE_DEVICES=0 ray start --num-gpus=1`: card 1 is someone's own, whatever NVML lists. Card 0
    busy with a foreign run that ends 5.5 s after the sweep's placement first read it busy: the job runs on
    card 0 then, never on card 1, and its row says how long it waited and for what."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0, busy=True), card("half", 1)])
    stop = free_later(folder, "half", tmp_path / "first-refusal", 5.5, [card("half", 0), card("half", 1)])
    try:
        counts, records = drive(lab, driver, tmp_path, profiles("half", 1), wait_s=120, hold_s=0)
    finally:
        stop.set()
    assert counts == {"ok": 1, "failed": 0, "skipped": 0}
    assert [(r["cuda_visible"], r["gpu_index"]) for r in records] == [("0", "0")]
    [row] = rows(tmp_path / "store")
    assert (row["env"]["gpu_index"], row["env"]["gpu_uuid"]) == ("0", "GPU-half-0")
    assert float(row["env"]["gpu_wait_s"]) >= 5 and f"pid {FOREIGN}" in row["env"]["gpu_wait_reason"], row["env"]
    assert "GPU 1" not in row["env"]["gpu_wait_reason"]


def test_placement_reads_only_the_cards_a_node_offers_ray(lab, driver, tmp_path):
    """Card 0 (half's only Ray card) busy for good, card 1 (kept out of Ray) idle: no job is placed to wait on
    card 0 one after another; the host's wait runs out once and both jobs are skipped naming card 0."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0, busy=True), card("half", 1)])
    t0 = time.monotonic()
    counts, records = drive(lab, driver, tmp_path, profiles("half", 2), wait_s=3, hold_s=0)
    assert counts == {"ok": 0, "failed": 0, "skipped": 2} and records == [], records  # never started
    for row in rows(tmp_path / "store"):
        assert row["reason"].startswith("no idle GPU on half before the deadline: half: GPU 0 busy"), row["reason"]
        assert f"pid {FOREIGN}" in row["reason"] and "GPU 1" not in row["reason"]
        # the wait ends at the first idleness sample past its bound: 3 s, or 4 on loaded cores; once, not twice
        assert re.search(r"waited [34] s for a foreign process to leave; --gpu-wait-s 3\)", row["reason"]), row
    assert time.monotonic() - t0 < 60


def test_a_job_queued_behind_our_own_is_not_skipped_however_long_that_one_runs(lab, driver, tmp_path):
    """One idle card, two GPU jobs, --gpu-wait-s 4: the first holds the card 6 s (after its own run); the
    second waits behind it (labprobe's own work, not a foreign process) and runs after it."""
    _, folder, _, _ = lab
    play(folder, "half", [card("half", 0), card("half", 1)])
    counts, records = drive(lab, driver, tmp_path, profiles("half", 2), wait_s=4, hold_s=-6)
    assert counts == {"ok": 2, "failed": 0, "skipped": 0}, records
    first, second = records
    assert first["end"] - first["start"] >= 6 and second["start"] >= first["end"] - 0.5
    assert all(r["cuda_visible"] == "0" for r in records)
    stored = rows(tmp_path / "store")
    # below --gpu-wait-s: a wait counted behind our own job would be 6 s or more
    assert all(float(r["env"]["gpu_wait_s"]) < 4 for r in stored), [r["env"] for r in stored]


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
