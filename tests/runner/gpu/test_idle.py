"""GPU idleness: the verdict from samples, what counts as ours, readings from fake files and the
NVML path (with the runs directory), and the job-side guard."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from nvml_util import GIB, fake_pynvml, gpu, write_fake

from runner.gpu import idle
from runner.gpu.freshness import FileAge
from runner.gpu.idle import GpuBusyError, GpuReading, Thresholds, verdict
from runner.gpu.nvml import FAKE_ENV, GpuSample

T = Thresholds()
NO_PID = 4_194_400
"""Above Linux's largest pid (2**22): no process here has it, so its user reads `?` (31337 once ran on CI)."""


def sample(**kw) -> GpuSample:
    base = dict(index=0, name="NVIDIA H200", mem_used_bytes=(0, 0, 0), util_pct=(0.0, 0.0, 0.0))
    return GpuSample(**(base | kw))


# -- verdict ------------------------------------------------------------------------------------------


def test_quiet_card_reads_idle():
    word, reason = verdict(sample(mem_used_bytes=(300 * 2**20,) * 3), thresholds=T)
    assert word == "idle"
    assert "0.29 GiB used" in reason  # 300 MiB / 1024 MiB


def test_foreign_process_is_busy_and_named():
    word, reason = verdict(sample(processes=((4242, 3 * GIB),)), own_pids={1, os.getpid()}, thresholds=T)
    assert word == "busy"
    assert "pid 4242" in reason and "3.00 GiB" in reason


def test_foreign_process_without_memory_figure_is_still_busy():
    word, reason = verdict(sample(processes=((77, None),)), own_pids=set(), thresholds=T)
    assert (word, reason) == ("busy", "pid 77 (user ?, memory unknown) computes on it")


def test_own_process_is_not_counted_nor_its_memory():
    me = os.getpid()
    s = sample(processes=((me, 20 * GIB),), mem_used_bytes=(20 * GIB + 100 * 2**20,))
    word, reason = verdict(s, own_pids={me}, thresholds=T)
    assert word == "idle", reason
    # the same card with the process not ours: busy on the pid and on memory
    word, reason = verdict(s, own_pids=set(), thresholds=T)
    assert word == "busy" and f"pid {me}" in reason and "memory used 20.10 GiB" in reason


def test_memory_at_threshold_is_busy_just_under_is_idle():
    assert verdict(sample(mem_used_bytes=(0, T.mem_used_bytes, 0)), thresholds=T)[0] == "busy"
    assert verdict(sample(mem_used_bytes=(T.mem_used_bytes - 1,)), thresholds=T)[0] == "idle"


def test_high_utilisation_in_part_of_the_window_is_busy():
    util = (0.0, 0.0, 0.0, 97.0, 0.0, 12.0, 0.0, 0.0)
    word, reason = verdict(sample(util_pct=util), thresholds=T)
    assert word == "busy"
    assert "in 2 of 8 samples" in reason and "max 97%" in reason
    assert verdict(sample(util_pct=(9.9,) * 8), thresholds=T)[0] == "idle"
    assert verdict(sample(util_pct=util), thresholds=Thresholds(util_pct=98))[0] == "idle"


def test_fresh_file_under_runs_dir_is_busy_old_file_is_idle():
    fresh = FileAge("/runs/exp1/events.out", 42.0)
    word, reason = verdict(sample(), newest=fresh, runs_dir="/runs", thresholds=T)
    assert word == "busy" and "/runs/exp1/events.out changed 42 s ago" in reason
    old = FileAge("/runs/exp1/events.out", T.runs_fresh_min * 60 + 1)
    word, reason = verdict(sample(), newest=old, runs_dir="/runs", thresholds=T)
    assert word == "idle" and "10.0 min old" in reason


def test_busy_reason_lists_every_cause():
    s = sample(processes=((9, 5 * GIB),), mem_used_bytes=(5 * GIB,), util_pct=(100.0,))
    _, reason = verdict(s, newest=FileAge("/r/x", 5.0), thresholds=T)
    assert len(reason.split("; ")) == 4


# -- ours ---------------------------------------------------------------------------------------------


def test_own_pids_hold_self_parent_and_child_but_not_a_detached_process():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    # `sh` starts a sleeper in the background and exits: the sleeper is reparented away from us,
    # like someone else's training run (it is no descendant of ours).
    out = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
    detached = int(out.stdout)
    try:
        ours = idle.own_pids()
        assert {os.getpid(), os.getppid(), child.pid} <= ours
        assert detached not in ours
    finally:
        child.kill()
        os.kill(detached, 9)
        child.wait()


# -- readings -----------------------------------------------------------------------------------------


def test_read_local_from_fake_file(fake_nvml_dir, tmp_path):
    write_fake(
        fake_nvml_dir,
        "box",
        [gpu(0, processes=[(os.getpid(), 2 * GIB)], mem=2 * GIB), gpu(1, processes=[(999_999, 8 * GIB)], mem=8 * GIB)],
    )
    r0, r1 = idle.read_local("box")
    assert (r0.verdict, r0.own_pids, r0.pids) == ("idle", (os.getpid(),), ())
    assert (r1.verdict, r1.pids) == ("busy", (999_999,)) and "pid 999999" in r1.reason
    (tmp_path / "run1").mkdir()
    (tmp_path / "run1" / "metrics.jsonl").write_text("{}")
    readings = idle.read_local("box", runs_dir=str(tmp_path))
    assert [r.verdict for r in readings] == ["busy", "busy"]
    assert readings[0].newest_file.endswith("metrics.jsonl") and "metrics.jsonl changed" in readings[0].reason
    (r0, _) = idle.read_local("box", runs_dir=str(tmp_path / "nope"))
    assert r0.verdict == "idle" and "nope missing: not checked" in r0.reason


def test_a_host_without_gpu_reads_one_no_gpu_row(fake_nvml_dir):
    (reading,) = idle.read_local("nowhere")
    assert (reading.verdict, reading.index) == ("no-gpu", -1) and "nowhere.json" in reading.reason


def test_read_local_over_the_nvml_path_sums_up_each_gpu_s_window(monkeypatch):
    """The stand-in pynvml (tests/runner/nvml_util.py): the thresholds' window reaches the sampling,
    and each GPU's samples become one reading (runner/gpu/nvml.py's own test checks the samples)."""
    calls = {"util": 0}
    monkeypatch.delenv(FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    t0 = time.perf_counter()
    r0, r1 = idle.read_local("box", thresholds=Thresholds(window_s=0.2, sample_hz=15))
    assert 0.2 <= time.perf_counter() - t0 < 2
    assert calls["util"] == 3 and r0.num_samples == 3 and r0.util_max_pct == 60.0
    assert (r0.verdict, r0.pids, r0.name, r0.uuid) == ("busy", (4242424,), "NVIDIA H200", "GPU-0")
    assert "pid 4242424 (user ?, 2.00 GiB) computes on it" in r0.reason and "1 of 3 samples" in r0.reason
    assert (r1.verdict, r1.num_samples) == ("idle", 0)  # no utilisation on a MIG device: not an error
    assert r1.mem_used_bytes == 0 and r1.mem_total_bytes == 150 * GIB  # v2's figure, not v1's


# -- guard --------------------------------------------------------------------------------------------


BUSY0 = [gpu(0, processes=[(NO_PID, 4 * GIB)], mem=4 * GIB), gpu(1)]
"""Card 0 busy with someone's run, card 1 idle."""


@pytest.fixture
def ray_env(monkeypatch):
    """The variables guard() may set, restored after the test (no leak into later Ray nodes)."""
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return monkeypatch


def test_guard_never_moves_a_job_off_the_card_ray_assigned(fake_nvml_dir, ray_env):
    """Ray assigned GPU 0 (logical counting), someone trains on it, GPU 1 is idle: the job does not take
    GPU 1 (it may be another job's, or kept out of Ray on purpose); it refuses naming GPU 0 only."""
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    write_fake(fake_nvml_dir, "box", BUSY0)
    with pytest.raises(GpuBusyError) as err:
        idle.guard("box")
    assert f"box: GPU 0 busy: pid {NO_PID} (user ?, 4.00 GiB) computes on it" in str(err.value)
    assert "GPU 1" not in str(err.value) and os.environ["CUDA_VISIBLE_DEVICES"] == "0"
    # Ray's card idle: kept as Ray set it, and CUDA numbers cards as NVML does (PCI order).
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "1")
    card = idle.guard("box")
    assert (card.index, card.uuid, card.assigned, card.waited_s, card.wait_reason) == (1, "GPU-fake-1", "1", 0.0, "")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_guard_takes_ray_assigning_by_uuid_and_keeps_to_it(fake_nvml_dir, ray_env):
    write_fake(fake_nvml_dir, "box", [gpu(0), gpu(1, processes=[(NO_PID, 4 * GIB)], mem=4 * GIB)])
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-1")
    with pytest.raises(GpuBusyError, match="box: GPU 1 busy"):
        idle.guard("box")  # GPU 0 reads idle: still not this job's
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-0")
    assert idle.guard("box").index == 0


def test_guard_waits_on_its_card_for_a_foreign_process_to_leave(fake_nvml_dir, ray_env):
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    write_fake(fake_nvml_dir, "box", BUSY0)

    def free_later():
        time.sleep(1.5)
        write_fake(fake_nvml_dir, "box", [gpu(0), gpu(1)])

    import threading

    threading.Thread(target=free_later).start()
    t0 = time.monotonic()
    card = idle.guard("box", wait_s=30)
    assert 1.5 <= time.monotonic() - t0 < 10 and card.index == 0
    assert 1.0 <= card.waited_s < 10 and f"pid {NO_PID}" in card.wait_reason and "GPU 1" not in card.wait_reason


def test_guard_wait_is_bounded_by_wait_s_and_by_the_deadline(fake_nvml_dir, ray_env):
    ray_env.setenv("CUDA_VISIBLE_DEVICES", "0")
    write_fake(fake_nvml_dir, "box", BUSY0)
    t0 = time.monotonic()
    with pytest.raises(GpuBusyError, match=r"waited [12] s on the card Ray gave this job"):
        idle.guard("box", wait_s=1.5)
    assert 1.5 <= time.monotonic() - t0 < 5
    t0 = time.monotonic()
    with pytest.raises(GpuBusyError, match="GPU 0 busy"):
        idle.guard("box", wait_s=600, deadline=time.time() + 1.0)
    assert time.monotonic() - t0 < 4


def test_assigned_cards_without_visible_devices_are_every_card():
    hot = GpuReading(host="box", index=0, name="H200", verdict="busy", reason="utilisation >= 10%", uuid="GPU-0")
    cool = GpuReading(host="box", index=1, name="H200", verdict="idle", reason="", uuid="GPU-1")
    assert idle.assigned_cards("box", [hot, cool], None) == [hot, cool]
    assert idle.assigned_cards("box", [hot, cool], "1") == [cool]
    assert idle.assigned_cards("box", [hot, cool], "GPU-0,GPU-1") == [hot]  # Ray's first card is the job's
    with pytest.raises(idle.GpuMisconfiguredError, match="names no GPU"):
        idle.assigned_cards("box", [hot, cool], "7")
    nothing = GpuReading(host="box", index=-1, name="", verdict="no-gpu", reason="no GPU: NVML unavailable")
    with pytest.raises(idle.GpuUnreadableError, match="no GPU: NVML unavailable"):
        idle.assigned_cards("box", [nothing], "0")


def test_guard_without_ray_takes_an_idle_card_and_with_fake_readings_leaves_the_environment(fake_nvml_dir, ray_env):
    write_fake(fake_nvml_dir, "box", [gpu(0, util=(0, 80, 90)), gpu(1)])
    assert idle.guard("box").index == 1
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    write_fake(fake_nvml_dir, "box", [gpu(0, util=(0, 80, 90))])
    with pytest.raises(GpuBusyError, match="utilisation"):
        idle.guard("box")
    with pytest.raises(idle.GpuUnreadableError, match="no-gpu"):
        idle.guard("absent")


def test_thresholds_from_cluster_overrides():
    from runner.lab.cluster import IdleThresholds

    t = Thresholds.from_cluster(IdleThresholds(max_util_pct=50, max_mem_used_mib=512, runs_quiet_min=30))
    assert t == Thresholds(util_pct=50.0, mem_used_bytes=512 * 2**20, runs_fresh_min=30.0)
    assert Thresholds.from_cluster(None) == Thresholds()


def test_a_file_dated_in_the_future_keeps_the_card_busy_and_says_why():
    future = FileAge("/runs/exp1/trainer_state.json", -3 * 86400.0)
    word, reason = verdict(sample(), newest=future, runs_dir="/runs", thresholds=T)
    assert word == "busy" and "is dated 3.0 d in the future (a clock ahead of this host's?)" in reason


def test_a_process_already_running_cuda_judges_only_its_card(fake_nvml_dir, ray_env):
    """`sweep --inline` after a first GPU job: CUDA runs on card 0 of this process; card 1 idle is no use."""
    import types

    started = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    ray_env.setitem(sys.modules, "torch", started)
    write_fake(fake_nvml_dir, "box", BUSY0)
    with pytest.raises(GpuBusyError, match="box: GPU 0 busy") as err:
        idle.guard("box")
    assert "GPU 1" not in str(err.value) and "CUDA_VISIBLE_DEVICES" not in os.environ
