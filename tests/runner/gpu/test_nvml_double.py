"""Every scenario of the pynvml test double (tests/helpers/nvml_double) through the verdict, the
sweep's placement read in this process, and a GPU probe run by hand (`labprobe probe carrier`).

The double stands for the NVIDIA driver (CI has none) and raises the installed nvidia-ml-py's own
error classes; everything above it is the real code path the H200 and the GB10 run.
"""

from __future__ import annotations

import json
import os
import pwd

import pytest
from nvml_util import EXPECTED, GIB, use_double
from transformers import Qwen3Config

from runner.cli import main
from runner.dispatch.placement import GpuPlacer
from runner.gpu import nvml
from runner.gpu.idle import Thresholds, check_direct, read_local

QUICK = Thresholds(window_s=0.2, sample_hz=10)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_each_scenario_reads_as_its_card_shows(scenario, monkeypatch):
    use_double(monkeypatch, scenario)
    [reading] = read_local("gx10", thresholds=QUICK)
    word, fragments = EXPECTED[scenario]
    assert reading.verdict == word, reading.reason
    for fragment in fragments:
        assert fragment in reading.reason, reading.reason


def test_gb10_memory_comes_from_the_host(monkeypatch):
    use_double(monkeypatch, "gb10-idle")
    [sample] = nvml.read_samples("gx10", window_s=0.2, sample_hz=10)
    meminfo = {
        line.split(":")[0]: int(line.split()[1]) * 1024 for line in open("/proc/meminfo") if line.endswith("kB\n")
    }
    assert sample.unified and sample.mem_used_bytes == () and sample.mem_total_bytes is None
    assert sample.unknown == ("memory: unified, not reported by NVML",)
    assert sample.host_mem_total_bytes == meminfo["MemTotal"]
    assert sample.util_pct == (0.0, 0.0) and sample.processes_known and sample.processes == ()


def test_a_busy_process_is_named_with_its_user(monkeypatch, tmp_path):
    """pid 1 is never ours (own_pids stops short of init); its user is whoever /proc says owns it."""
    card = {"name": "NVIDIA GB10", "util": [0], "memory": "NOT_SUPPORTED", "processes": [[1, 2 * GIB]]}
    (tmp_path / "s.json").write_text(json.dumps({"devices": [card]}))
    use_double(monkeypatch, tmp_path / "s.json")
    [reading] = read_local("gx10", thresholds=QUICK)
    user = pwd.getpwuid(os.stat("/proc/1").st_uid).pw_name
    assert reading.verdict == "busy" and reading.reason.startswith(f"pid 1 (user {user}, 2.00 GiB) computes on it")
    assert reading.users == (user,)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_placement_read_here_places_idle_cards_only_and_tells_unreadable_from_busy(scenario, monkeypatch):
    use_double(monkeypatch, scenario)
    placer = GpuPlacer(deadline=None, read=lambda host: read_local(host, thresholds=QUICK))
    placed, why = placer.try_place("gx10")
    word, fragments = EXPECTED[scenario]
    assert placed == (word == "idle")
    assert placer.unreadable("gx10") == (word == "unreachable")
    if not placed:
        assert why.startswith("gx10: ") and fragments[0] in why, why


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_a_gpu_probe_run_by_hand_checks_the_card(scenario, monkeypatch):
    use_double(monkeypatch, scenario)
    refusal = check_direct("gx10", "auto", thresholds=QUICK)
    assert (refusal is None) == (EXPECTED[scenario][0] == "idle"), refusal
    assert check_direct("gx10", "cpu", thresholds=QUICK) is None  # the CPU is never checked


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    Qwen3Config(
        hidden_size=32,
        intermediate_size=64,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=128,
        num_hidden_layers=1,
    ).save_pretrained(path)
    return path


def test_labprobe_probe_carrier_refuses_a_busy_gb10_in_one_line(tiny_checkpoint, monkeypatch, capsys):
    use_double(monkeypatch, "gb10-busy")
    code = main(["probe", "carrier", "--checkpoint", str(tiny_checkpoint), "--steps", "0"])
    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    [line] = captured.err.splitlines()
    assert line.startswith("labprobe probe carrier: not run, the GPU is not idle: ")
    assert "pid 4242424 (user ?, 20.00 GiB) computes on it" in line and "--no-idle-check" in line
    code = main(["probe", "carrier", "--checkpoint", str(tiny_checkpoint), "--steps", "0", "--no-idle-check"])
    assert code == 0 and "carrier" in capsys.readouterr().out


def test_labprobe_probe_carrier_runs_on_an_idle_gb10_and_names_fresh_run_files(
    tiny_checkpoint, monkeypatch, capsys, tmp_path
):
    use_double(monkeypatch, "gb10-idle")
    assert main(["probe", "carrier", "--checkpoint", str(tiny_checkpoint), "--steps", "0"]) == 0
    capsys.readouterr()
    (tmp_path / "runs" / "exp1").mkdir(parents=True)
    (tmp_path / "runs" / "exp1" / "metrics.jsonl").write_text("{}")
    args = [
        "probe",
        "carrier",
        "--checkpoint",
        str(tiny_checkpoint),
        "--steps",
        "0",
        "--runs-dir",
        str(tmp_path / "runs"),
    ]
    assert main(args) == 1
    assert "exp1/metrics.jsonl changed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("scenario", "fake_cuda", "status", "code"),
    [
        ("gb10-idle", "1", "ok", 0),
        ("gb10-idle", None, "failed", 1),  # this machine's torch has no CUDA: no CPU timing stored as gb10's
        ("gb10-busy", "1", "skipped", 0),
        ("gpu-lost", "1", "skipped", 1),
        ("driver-not-loaded", "1", "skipped", 1),
    ],
)
def test_an_inline_sweep_on_the_gb10_itself(scenario, fake_cuda, status, code, monkeypatch, tmp_path, capsys):
    """`labprobe sweep --inline gb10`: placement and the job's guard read NVML in this process; torch's view
    of CUDA is the double's card (runner.gpu.cuda's seam) or, without the seam, this machine's: none."""
    from sweep_util import write_cluster

    from runner.store.store import Store

    plans = {
        "gpu": [{"probe": "carrier", "hosts": ["gb10"], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": 0}}]
    }
    lab = write_cluster(tmp_path, plans, extra_hosts=[{"name": "gb10", "gpus": 1, "idle": {"window_s": 0.2}}])
    use_double(monkeypatch, scenario)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # the guard keeps card 0 (idle) instead of setting its UUID here
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)  # set by the guard: restored after the test
    if fake_cuda:
        monkeypatch.setenv("LABPROBE_FAKE_CUDA", fake_cuda)
    else:
        monkeypatch.delenv("LABPROBE_FAKE_CUDA", raising=False)
    args = ["sweep", "--cluster", str(lab), "--plan", "gpu", "--inline", "gb10", "--gpu-wait-s", "1"]
    assert main([*args, "--store", str(tmp_path / "store")]) == code
    capsys.readouterr()
    [job] = Store(tmp_path / "store").jobs().to_dict("records")
    assert job["status"] == status, job["reason"]
    if status == "failed":  # one line naming CUDA and what torch says
        assert job["reason"].startswith("no usable CUDA device: gb10: GPU job placed on GPU 0 (GPU-gb10-0)")
        assert "torch.cuda.is_available() is False" in job["reason"] and "the CPU wheel?" in job["reason"]
    elif code:
        assert job["reason"].startswith("GPU host gb10 could not be read before the deadline"), job["reason"]
    if status == "ok":  # the row records the card
        env = json.loads(job["env_json"])
        assert (env["gpu_index"], env["gpu_uuid"], env["gpu"]) == ("0", "GPU-gb10-0", "NVIDIA GB10"), env
        assert env["torch"] and "gpu_wait_s" in env


def test_a_gb10_whose_driver_reports_the_hosts_memory_is_not_read_busy_by_it(monkeypatch, tmp_path):
    """Some GB10 drivers answer the memory call with the host's totals: the OS's share is no GPU job."""
    card = {"name": "NVIDIA GB10", "uuid": "GPU-gb10", "util": [0], "memory": {"used": 9 * GIB, "total": 119 * GIB}}
    (tmp_path / "s.json").write_text(json.dumps({"devices": [{**card, "processes": []}]}))
    use_double(monkeypatch, tmp_path / "s.json")
    [reading] = read_local("gx10", thresholds=QUICK)
    assert reading.verdict == "idle" and "NVML's figures are the host's (not used)" in reading.reason


def test_a_probe_by_hand_is_refused_where_torch_sees_a_gpu_nvml_cannot_read(monkeypatch, tmp_path):
    import torch

    (tmp_path / "s.json").write_text(json.dumps({"init": "LIBRARY_NOT_FOUND", "devices": []}))
    use_double(monkeypatch, tmp_path / "s.json")
    assert check_direct("gx10", "auto", thresholds=QUICK) is None  # no GPU for torch either: the CPU runs it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    refusal = check_direct("gx10", "auto", thresholds=QUICK)
    assert refusal.startswith("gx10: NVML gives no reading") and "--no-idle-check" in refusal
    assert check_direct("gx10", "cpu", thresholds=QUICK) is None
