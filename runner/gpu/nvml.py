"""GPU samples for the idleness verdict (runner.gpu.idle): from NVML, or from a fake file in tests.

Every GPU of this machine is sampled together over a window: memory used, utilisation and the
compute processes seen. A host without nvidia-ml-py, the NVML library or a GPU gives a reason
string (`no GPU: ...`), never an error. With env LABPROBE_FAKE_NVML_DIR set, samples come from
`<dir>/<host>.json` instead (tests):

    [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-...", "mem_used_bytes": 0,
      "mem_total_bytes": 150000000000, "util_pct": [0, 3, 0],
      "processes": [{"pid": 4242, "mem_used_bytes": 8000000000}]}]

Never imports Ray: the GPU box runs this standalone.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from probes.result import InputError

FAKE_ENV = "LABPROBE_FAKE_NVML_DIR"


@dataclasses.dataclass(frozen=True)
class GpuSample:
    """What NVML (or the fake file) showed for one GPU over the window: the verdict's input."""

    index: int
    name: str
    uuid: str = ""
    mem_used_bytes: tuple[int, ...] = ()
    """Memory used at each sample."""
    mem_total_bytes: int | None = None
    util_pct: tuple[float, ...] = ()
    """Utilisation at each sample."""
    processes: tuple[tuple[int, int | None], ...] = ()
    """(pid, memory used or None where NVML cannot tell) of every compute process seen in the window."""


def read_samples(host: str, *, window_s: float, sample_hz: float) -> list[GpuSample] | str:
    """Every GPU of this machine (`host` names its fake file); a reason string when there is none."""
    fake = os.environ.get(FAKE_ENV)
    return _read_fake(fake, host) if fake else _read_nvml(window_s, sample_hz)


def _read_fake(directory: str, host: str) -> list[GpuSample] | str:
    """Samples from `<directory>/<host>.json`; a reason string when there is no such file."""
    path = Path(directory) / f"{host}.json"
    if not path.is_file():
        return f"no GPU: no fake NVML file {path}"
    try:
        gpus = json.loads(path.read_text())
        return [
            GpuSample(
                index=int(g["index"]),
                name=str(g.get("name", "")),
                uuid=str(g.get("uuid", "")),
                mem_used_bytes=(int(g.get("mem_used_bytes", 0)),),
                mem_total_bytes=g.get("mem_total_bytes"),
                util_pct=tuple(float(u) for u in g.get("util_pct", [0.0])),
                processes=tuple((int(p["pid"]), p.get("mem_used_bytes")) for p in g.get("processes", [])),
            )
            for g in gpus
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{path}: malformed fake NVML reading: {exc}") from None


def _nvml_memory_used(pynvml: Any, handle: Any) -> int:
    """Memory used without the driver's reserved part (NVML v2) where the driver offers it."""
    try:
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle, version=pynvml.nvmlMemory_v2).used)
    except Exception:  # older drivers or bindings: v1 counts reserved memory as used
        return int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)


def _nvml_processes(pynvml: Any, handle: Any) -> list[tuple[int, int | None]]:
    procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
    try:
        procs += list(pynvml.nvmlDeviceGetMPSComputeRunningProcesses(handle))
    except Exception:  # MPS queries are unsupported on many drivers
        pass
    # usedGpuMemory is None where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE, some containers)
    return [(int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in procs]


def _read_nvml(window_s: float, sample_hz: float) -> list[GpuSample] | str:
    """Sample every GPU together for `window_s`; a reason string when NVML or GPUs are missing."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, driver not loaded ...
        return f"no GPU: NVML unavailable ({type(exc).__name__}: {exc})"
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not handles:
            return "no GPU: NVML sees no device"
        num_samples = max(2, round(window_s * sample_hz))
        mems: list[list[int]] = [[] for _ in handles]
        utils: list[list[float]] = [[] for _ in handles]
        procs: list[dict[int, int | None]] = [{} for _ in handles]
        start = time.monotonic()
        for k in range(num_samples):
            for i, h in enumerate(handles):
                try:
                    utils[i].append(float(pynvml.nvmlDeviceGetUtilizationRates(h).gpu))
                except pynvml.NVMLError_NotSupported:  # MIG instances have no device utilisation
                    pass
                mems[i].append(_nvml_memory_used(pynvml, h))
                for pid, mem in _nvml_processes(pynvml, h):
                    old = procs[i].get(pid)
                    procs[i][pid] = mem if old is None else max(old, mem or 0)
            if k + 1 < num_samples:
                time.sleep(max(0.0, start + (k + 1) * window_s / (num_samples - 1) - time.monotonic()))
        return [
            GpuSample(
                index=i,
                name=_text(pynvml.nvmlDeviceGetName(h)),
                uuid=_text(pynvml.nvmlDeviceGetUUID(h)),
                mem_used_bytes=tuple(mems[i]),
                mem_total_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
                util_pct=tuple(utils[i]),
                processes=tuple(sorted(procs[i].items())),
            )
            for i, h in enumerate(handles)
        ]
    finally:
        pynvml.nvmlShutdown()


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
