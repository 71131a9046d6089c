"""Fake NVML readings for the idleness tests: `<dir>/<host>.json` files in runner/gpu/nvml.py's fake
format, and a stand-in pynvml module for the real sampling path."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

GIB = 1024**3


def write_fake(directory: Path, host: str, gpus: list[dict]) -> None:
    (directory / f"{host}.json").write_text(json.dumps(gpus))


def gpu(index=0, processes=(), util=(0, 0, 0), mem=0, name="NVIDIA H200") -> dict:
    return {
        "index": index,
        "name": name,
        "uuid": f"GPU-fake-{index}",
        "mem_used_bytes": mem,
        "mem_total_bytes": 150 * GIB,
        "util_pct": list(util),
        "processes": [{"pid": p, "mem_used_bytes": m} for p, m in processes],
    }


def fake_pynvml(calls: dict) -> types.SimpleNamespace:
    """Two GPUs: GPU 0 with utilisation 5, 60, 0 % and pid 4242424 showing up (above Linux's largest possible
    pid_max, 4,194,304, so no process on the test machine has it and its user reads "?"; memory unknown, then
    2 GiB); GPU 1 a MIG instance (no utilisation). MPS queries are unsupported."""

    class NVMLError(Exception):
        pass

    class NotSupported(NVMLError):
        pass

    utils = iter([5.0, 60.0, 0.0])

    def util(h):
        if h == 1:
            raise NotSupported("MIG")
        calls["util"] += 1
        return types.SimpleNamespace(gpu=next(utils))

    def memory(h, version=None):  # v1 counts the driver's reserved memory as used: 99 GiB here
        used = 99 * GIB if version is None else [2 * GIB, 0][h]
        return types.SimpleNamespace(used=used, total=150 * GIB)

    procs = iter(
        [
            [],
            [types.SimpleNamespace(pid=4242424, usedGpuMemory=None)],
            [types.SimpleNamespace(pid=4242424, usedGpuMemory=2 * GIB)],
        ]
    )
    return types.SimpleNamespace(
        NVMLError=NVMLError,
        NVMLError_NotSupported=NotSupported,
        nvmlMemory_v2=2,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetName=lambda h: b"NVIDIA H200",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetUtilizationRates=util,
        nvmlDeviceGetMemoryInfo=memory,
        nvmlDeviceGetComputeRunningProcesses=lambda h: next(procs) if h == 0 else [],
        nvmlDeviceGetMPSComputeRunningProcesses=lambda h: (_ for _ in ()).throw(NotSupported("no MPS")),
    )


DOUBLE_DIR = Path(__file__).resolve().parent / "nvml_double"
"""The pynvml test double (tests/helpers/nvml_double/pynvml.py): put first on PYTHONPATH for other processes."""
SCENARIO_ENV = "LABPROBE_PYNVML_SCENARIO"
EXPECTED = {
    # scenario -> (verdict, fragments of the reason), worked out from what each card shows
    "gb10-idle": ("idle", ["no foreign process", "memory: unified, not reported by NVML", "(/proc/meminfo)"]),
    "gb10-busy": ("busy", ["pid 4242424 (user ?, 20.00 GiB) computes on it", "(max 95%)"]),
    "gb10-process-at-0pct": ("busy", ["pid 4242424 (user ?, 20.00 GiB) computes on it"]),
    "gb10-nothing-readable": ("unreachable", ["cannot tell idle from busy", "NVMLError_NoPermission"]),
    "mig": ("idle", ["0.25 GiB used", "utilisation: not reported by NVML (NVMLError_NotSupported)"]),
    "gpu-lost": ("unreachable", ["GPU 0 lost (NVMLError_GpuIsLost"]),
    "driver-not-loaded": ("unreachable", ["NVMLError_DriverNotLoaded"]),
    "process-list-needs-permission": (
        "busy",
        ["memory used 30.00 GiB >= 1.00 GiB", "process list: not reported by NVML (NVMLError_NoPermission)"],
    ),
}


def load_double() -> types.ModuleType:
    """The double as module `pynvml` (it loads the installed nvidia-ml-py itself, for the error classes)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("pynvml", DOUBLE_DIR / "pynvml.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def use_double(monkeypatch, scenario: str | Path) -> None:
    """In this process: NVML is the double playing `scenario` (a name, or a JSON file); no fake files."""
    monkeypatch.delenv("LABPROBE_FAKE_NVML_DIR", raising=False)
    monkeypatch.setenv(SCENARIO_ENV, str(scenario))
    monkeypatch.setitem(sys.modules, "pynvml", load_double())
