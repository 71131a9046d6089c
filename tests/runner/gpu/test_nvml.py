"""GPU samples: the fake file's format, a missing or malformed one, no NVML, and the NVML sampling
path through a stand-in module with pynvml's names."""

from __future__ import annotations

import sys
import time

import pytest
from nvml_util import GIB, fake_pynvml, gpu, write_fake

from probes.result import InputError
from runner.gpu import nvml
from runner.gpu.nvml import GpuSample


def test_fake_file_gives_one_sample_per_gpu(fake_nvml_dir):
    write_fake(
        fake_nvml_dir, "box", [gpu(0, processes=[(4242, 2 * GIB), (77, None)], util=(0, 95), mem=3 * GIB), gpu(1)]
    )
    s0, s1 = nvml.read_samples("box", window_s=3.0, sample_hz=5.0)
    assert s0 == GpuSample(
        index=0,
        name="NVIDIA H200",
        uuid="GPU-fake-0",
        mem_used_bytes=(3 * GIB,),
        mem_total_bytes=150 * GIB,
        util_pct=(0.0, 95.0),
        processes=((4242, 2 * GIB), (77, None)),
    )
    assert (s1.index, s1.uuid, s1.processes, s1.util_pct) == (1, "GPU-fake-1", (), (0.0, 0.0, 0.0))


def test_missing_fake_file_is_a_reason_naming_it(fake_nvml_dir):
    got = nvml.read_samples("nowhere", window_s=3.0, sample_hz=5.0)
    assert got == f"no GPU: no fake NVML file {fake_nvml_dir / 'nowhere.json'}"


def test_malformed_fake_file_is_an_input_error_naming_it(fake_nvml_dir):
    (fake_nvml_dir / "bad.json").write_text('[{"name": "no index"}]')
    with pytest.raises(InputError, match="bad.json"):
        nvml.read_samples("bad", window_s=3.0, sample_hz=5.0)


def test_no_nvml_is_a_reason_never_an_error(monkeypatch):
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    got = nvml.read_samples("cpu-box", window_s=3.0, sample_hz=5.0)
    assert got.startswith("no GPU: NVML unavailable (ModuleNotFoundError: ")


def test_no_nvml_library_on_this_machine_is_a_reason(monkeypatch):
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    pynvml = pytest.importorskip("pynvml")
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML")
    except pynvml.NVMLError:
        pass
    got = nvml.read_samples("cpu-box", window_s=3.0, sample_hz=5.0)
    assert got.startswith("no GPU: NVML unavailable") and "NVMLError" in got


def test_nvml_path_samples_every_gpu_over_the_window(monkeypatch):
    """CI has no NVML: a stand-in module with pynvml's names checks the sampling code path that the
    H200 run exercises for real (benchmarks/gpu_idle_check.py)."""
    calls = {"util": 0}
    monkeypatch.delenv(nvml.FAKE_ENV, raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(calls))
    t0 = time.perf_counter()
    s0, s1 = nvml.read_samples("box", window_s=0.2, sample_hz=15)  # round(0.2 * 15) = 3 samples
    assert 0.2 <= time.perf_counter() - t0 < 2
    assert calls["util"] == 3 and s0.util_pct == (5.0, 60.0, 0.0)
    assert (s0.name, s0.uuid, s1.uuid) == ("NVIDIA H200", "GPU-0", "GPU-1")  # bytes decoded
    assert s0.processes == ((4242424, 2 * GIB),)  # one entry per pid, its largest known memory
    assert s1.util_pct == ()  # no utilisation on a MIG device: not an error
    assert s0.mem_used_bytes == (2 * GIB,) * 3 and s1.mem_used_bytes == (0, 0, 0)  # v2's figure, not v1's
    assert s0.mem_total_bytes == s1.mem_total_bytes == 150 * GIB
