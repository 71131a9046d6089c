"""GPU idleness: the verdict from readings, what counts as ours, the runs directory, the fake and
no-NVML paths, the job-side guard and `labprobe idle` over a real Ray cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from probes.result import InputError
from runner import idle
from runner.idle import GIB, FileAge, GpuBusyError, GpuReading, GpuSample, Thresholds, verdict

T = Thresholds()


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
    assert (word, reason) == ("busy", "pid 77 computes on it")


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


# -- ours, and the runs directory -----------------------------------------------------------------------

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


def test_newest_file_finds_the_newest_and_stops_at_a_fresh_one(tmp_path):
    now = time.time()
    files = {"a/old.log": 7200, "a/b/c/newer.log": 3600, "top.txt": 5000}
    for rel, age in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (now - age, now - age))
    (tmp_path / "a" / "loop").symlink_to(tmp_path)  # must not be followed
    got = idle.newest_file(str(tmp_path), fresh_s=600, now=now)
    assert got.path == str(tmp_path / "a/b/c/newer.log") and got.age_s == pytest.approx(3600, abs=1)
    (tmp_path / "a" / "ckpt.pt").write_text("y")
    got = idle.newest_file(str(tmp_path), fresh_s=600)
    assert got.path.endswith("ckpt.pt") and got.age_s < 600
    assert idle.newest_file(str(tmp_path / "missing"), fresh_s=600) is None


def test_newest_file_opens_the_newest_folder_first_and_stops_there(tmp_path, monkeypatch):
    old = time.time() - 7200
    for i in range(30):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / "log.txt").write_text("x")
        os.utime(tmp_path / f"run{i}" / "log.txt", (old, old))
        if i != 17:  # run17 is live: a file was just created in it, so its folder is the newest
            os.utime(tmp_path / f"run{i}", (old, old))
    os.utime(tmp_path / "run17" / "log.txt")
    opened = []
    real_scandir = os.scandir

    def counting_scandir(path):
        opened.append(path)
        return real_scandir(path)

    monkeypatch.setattr(idle.os, "scandir", counting_scandir)
    got = idle.newest_file(str(tmp_path), fresh_s=600)
    assert got.path == str(tmp_path / "run17" / "log.txt") and got.age_s < 600
    assert opened == [str(tmp_path), str(tmp_path / "run17")]  # a full walk would open all 31


# -- readings: fake file, no NVML -----------------------------------------------------------------------

def write_fake(directory: Path, host: str, gpus: list[dict]) -> None:
    (directory / f"{host}.json").write_text(json.dumps(gpus))


def gpu(index=0, processes=(), util=(0, 0, 0), mem=0) -> dict:
    return {"index": index, "name": "NVIDIA H200", "uuid": f"GPU-fake-{index}", "mem_used_bytes": mem,
            "mem_total_bytes": 150 * GIB, "util_pct": list(util),
            "processes": [{"pid": p, "mem_used_bytes": m} for p, m in processes]}


def test_read_local_from_fake_file(fake_nvml_dir, tmp_path):
    write_fake(fake_nvml_dir, "box", [gpu(0, processes=[(os.getpid(), 2 * GIB)], mem=2 * GIB),
                                      gpu(1, processes=[(999_999, 8 * GIB)], mem=8 * GIB)])
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


def test_missing_fake_file_reads_no_gpu(fake_nvml_dir):
    (reading,) = idle.read_local("nowhere")
    assert (reading.verdict, reading.index) == ("no-gpu", -1) and "nowhere.json" in reading.reason


def test_malformed_fake_file_is_an_input_error_naming_it(fake_nvml_dir):
    (fake_nvml_dir / "bad.json").write_text('[{"name": "no index"}]')
    with pytest.raises(InputError, match="bad.json"):
        idle.read_local("bad")


def test_no_nvml_reads_no_gpu_never_an_error(monkeypatch):
    monkeypatch.delenv(idle.FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    (reading,) = idle.read_local("cpu-box")
    assert reading.verdict == "no-gpu" and "NVML unavailable" in reading.reason


def test_no_nvml_library_on_this_machine_reads_no_gpu(monkeypatch):
    monkeypatch.delenv(idle.FAKE_ENV, raising=False)
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML")
    except pynvml.NVMLError:
        pass
    (reading,) = idle.read_local("cpu-box")
    assert reading.verdict == "no-gpu" and "NVMLError" in reading.reason


def test_nvml_path_samples_every_gpu_over_the_window(monkeypatch):
    """CI has no NVML: a stand-in module with pynvml's names checks the sampling code path that the
    H200 run exercises for real (benchmarks/gpu_idle_check.py)."""
    import types

    class NVMLError(Exception):
        pass

    class NotSupported(NVMLError):
        pass

    calls = {"util": 0}
    utils = iter([5.0, 60.0, 0.0])  # GPU 0 across three samples

    def util(h):
        if h == 1:
            raise NotSupported("MIG")
        calls["util"] += 1
        return types.SimpleNamespace(gpu=next(utils))

    def memory(h, version=None):  # v1 counts the driver's reserved memory as used: 99 GiB here
        used = 99 * GIB if version is None else [2 * GIB, 0][h]
        return types.SimpleNamespace(used=used, total=150 * GIB)

    procs = iter([[], [types.SimpleNamespace(pid=4242, usedGpuMemory=None)],
                  [types.SimpleNamespace(pid=4242, usedGpuMemory=2 * GIB)]])
    fake = types.SimpleNamespace(
        NVMLError=NVMLError, NVMLError_NotSupported=NotSupported, nvmlMemory_v2=2,
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetComputeRunningProcesses=lambda h: next(procs) if h == 0 else [],
        nvmlDeviceGetMPSComputeRunningProcesses=lambda h: (_ for _ in ()).throw(NotSupported("no MPS")))
    monkeypatch.delenv(idle.FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    t0 = time.perf_counter()
    r0, r1 = idle.read_local("box", thresholds=Thresholds(window_s=0.2, sample_hz=15))
    assert 0.2 <= time.perf_counter() - t0 < 2
    assert calls["util"] == 3 and r0.num_samples == 3 and r0.util_max_pct == 60.0
    assert (r0.verdict, r0.pids, r0.name, r0.uuid) == ("busy", (4242,), "NVIDIA H200", "GPU-0")
    assert "pid 4242 computes on it (2.00 GiB)" in r0.reason and "1 of 3 samples" in r0.reason
    assert (r1.verdict, r1.num_samples) == ("idle", 0)  # no utilisation on a MIG device: not an error
    assert r1.mem_used_bytes == 0 and r1.mem_total_bytes == 150 * GIB  # v2's figure, not v1's


# -- guard --------------------------------------------------------------------------------------------

def test_guard_on_a_two_gpu_host_moves_the_job_off_the_busy_card_ray_assigned(fake_nvml_dir, monkeypatch):
    """Ray assigned GPU 0 (logical counting), someone trains on it, GPU 1 is idle: the job goes
    to GPU 1 (by UUID, set before CUDA starts) instead of refusing forever."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # restored after the test: no leak
    write_fake(fake_nvml_dir, "box", [gpu(0, processes=[(31337, 4 * GIB)], mem=4 * GIB), gpu(1)])
    card = idle.guard("box")
    assert card == idle.Card(index=1, uuid="GPU-fake-1", assigned="0", switched=True)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-fake-1"
    # Ray's card idle: kept as assigned, nothing switched.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert idle.guard("box") == idle.Card(index=1, uuid="GPU-fake-1", assigned="1", switched=False)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1"
    # Both cards busy: refused, naming every card and why; the variable untouched.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    write_fake(fake_nvml_dir, "box", [gpu(0, processes=[(31337, 4 * GIB)], mem=4 * GIB),
                                      gpu(1, util=(0, 95, 90))])
    with pytest.raises(GpuBusyError, match=r"box: GPU 0 busy: pid 31337 computes on it \(4.00 GiB\).*; "
                                           r"GPU 1 busy: utilisation"):
        idle.guard("box")
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"


def test_guard_accepts_ray_assigning_by_uuid(fake_nvml_dir, monkeypatch):
    write_fake(fake_nvml_dir, "box", [gpu(0), gpu(1, processes=[(31337, 4 * GIB)], mem=4 * GIB)])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-fake-1")
    assert idle.guard("box") == idle.Card(index=0, uuid="GPU-fake-0", assigned="GPU-fake-1", switched=True)
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "GPU-fake-0"


def test_pick_card_without_visible_devices_points_the_job_at_an_idle_card():
    hot = GpuReading(host="box", index=0, name="H200", verdict="busy", reason="utilisation >= 10%",
                     uuid="GPU-0")
    cool = GpuReading(host="box", index=1, name="H200", verdict="idle", reason="", uuid="GPU-1")
    assert idle.pick_card("box", [hot, cool], None) == idle.Card(1, "GPU-1", None, False)
    assert idle.pick_card("box", [hot, cool], "1") == idle.Card(1, "GPU-1", "1", False)
    assert idle.pick_card("box", [hot, cool], "0") == idle.Card(1, "GPU-1", "0", True)
    with pytest.raises(GpuBusyError, match="box: GPU 0 busy: utilisation"):
        idle.pick_card("box", [hot], None)
    with pytest.raises(GpuBusyError, match="box: GPU 0 busy: utilisation"):
        idle.pick_card("box", [hot], "0")
    with pytest.raises(GpuBusyError, match="names no GPU"):
        idle.pick_card("box", [hot, cool], "7")


def test_guard_with_fake_readings_checks_but_leaves_an_unset_environment(fake_nvml_dir, monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    write_fake(fake_nvml_dir, "box", [gpu(0, util=(0, 80, 90)), gpu(1)])
    assert idle.guard("box").index == 1
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    write_fake(fake_nvml_dir, "box", [gpu(0, util=(0, 80, 90))])
    with pytest.raises(GpuBusyError, match="utilisation"):
        idle.guard("box")
    with pytest.raises(GpuBusyError, match="no-gpu"):
        idle.guard("absent")


def test_thresholds_from_cluster_overrides():
    from runner.cluster import IdleThresholds

    t = Thresholds.from_cluster(IdleThresholds(max_util_pct=50, max_mem_used_mib=512, runs_quiet_min=30))
    assert t == Thresholds(util_pct=50.0, mem_used_bytes=512 * 2**20, runs_fresh_min=30.0)
    assert Thresholds.from_cluster(None) == Thresholds()


# -- labprobe idle over the shared Ray cluster -----------------------------------------------------------

def test_labprobe_idle_reads_every_host(ray_cluster, fake_nvml_dir, tmp_path, capsys):
    from runner.cli import main

    runs = tmp_path / "runs"
    (runs / "exp").mkdir(parents=True)
    (runs / "exp" / "log.txt").write_text("step 10")
    (tmp_path / "cluster.yaml").write_text(f"""
hosts:
  - {{name: gx10, address: 10.0.0.1, gpus: 1, runs_root: {runs}}}
  - {{name: ana-ml2, address: 10.0.0.2, gpus: 2, idle: {{max_util_pct: 50}}}}
  - {{name: ghost, address: 10.0.0.3}}
""")
    write_fake(fake_nvml_dir, "gx10", [gpu(0)])
    write_fake(fake_nvml_dir, "ana-ml2", [gpu(0, util=(30, 40)), gpu(1, processes=[(4242, 9 * GIB)])])
    code = main(["idle", "--cluster", str(tmp_path / "cluster.yaml"), "--json", "--timeout-s", "20"])
    rows = json.loads(capsys.readouterr().out)
    assert code == 1
    got = {(r["host"], r["gpu"]): r for r in rows}
    assert set(got) == {("gx10", 0), ("ana-ml2", 0), ("ana-ml2", 1), ("ghost", None)}
    assert got["gx10", 0]["verdict"] == "busy" and "log.txt changed" in got["gx10", 0]["reason"]
    assert got["gx10", 0]["node_host"] == "gx10"  # read on the node carrying the label
    assert got["ana-ml2", 0]["verdict"] == "idle"  # 40% is under this host's 50% threshold
    assert got["ana-ml2", 1]["verdict"] == "busy" and got["ana-ml2", 1]["pids"] == [4242]
    assert got["ghost", None]["verdict"] == "unreachable" and "ghost" in got["ghost", None]["reason"]
    write_fake(fake_nvml_dir, "ana-ml2", [gpu(0)])
    code = main(["idle", "--cluster", str(tmp_path / "cluster.yaml")])
    lines = capsys.readouterr().out.splitlines()
    assert code == 1 and len(lines) == 2 + 3  # header, rule, one line per GPU or host
    assert any(line.split()[:4] == ["ana-ml2", "0", "NVIDIA", "H200"] and "idle" in line for line in lines)


def test_labprobe_idle_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from runner.cli import main

    assert main(["idle", "--timeout-s", "0"]) == 2
    assert capsys.readouterr().err.strip() == "labprobe idle: error: --timeout-s: must be > 0 (got 0.0)"
    assert main(["idle", "--cluster", str(tmp_path / "none.yaml")]) == 2
    assert "none.yaml: no such cluster file" in capsys.readouterr().err
