"""GPU samples for the idleness verdict (runner.gpu.idle): from NVML, or from a fake file in tests.

Every GPU of this machine is sampled together over a window: memory used, utilisation and the
compute (and MPS) processes seen with each one's memory. Each field is read on its own: a field
NVML cannot give on this card (`NotSupported`, `NoPermission`, `Unknown`; a GB10 has no memory
figures, a MIG instance no utilisation, a container may not list processes) is left unknown with a
note saying why, and the verdict is made from the rest. A unified-memory device (GB10: CPU and GPU
share the host's memory) says so and carries the host's memory from /proc/meminfo instead. A GPU
that is really gone (`GpuIsLost`, the driver not loaded) is a sample with `lost` set: the host is
unreachable, not idle. A host without nvidia-ml-py, the NVML library or a GPU gives a reason
string (`no GPU: ...`), never an error. With env LABPROBE_FAKE_NVML_DIR set, samples come from
`<dir>/<host>.json` instead (tests):

    [{"index": 0, "name": "NVIDIA H200", "uuid": "GPU-...", "mem_used_bytes": 0,
      "mem_total_bytes": 150000000000, "util_pct": [0, 3, 0],
      "processes": [{"pid": 4242, "mem_used_bytes": 8000000000}]}]

Never imports Ray: the GPU box runs this standalone.
"""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path
from typing import Any, Callable

from probes.result import InputError, loads

FAKE_ENV = "LABPROBE_FAKE_NVML_DIR"
QUIET_ERRORS = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_Unknown", "NVMLError_FunctionNotFound")
"""Errors that leave one field unknown: the card answers, it just does not give this figure."""
LOST_ERRORS = ("NVMLError_GpuIsLost", "NVMLError_DriverNotLoaded")
"""Errors that mean the GPU (or all of them) is gone: unreachable, never idle."""
UNIFIED_NAMES = ("GB10",)
"""Devices whose memory is the host's (Grace-Blackwell GB10: DGX Spark, ASUS Ascent GX10)."""
UNIFIED_NOTE = "memory: unified, not reported by NVML"
UNIFIED_REPORTED_NOTE = "memory: unified, NVML's figures are the host's (not used)"


@dataclasses.dataclass(frozen=True)
class GpuSample:
    """What NVML (or the fake file) showed for one GPU over the window: the verdict's input."""

    index: int
    name: str
    uuid: str = ""
    mem_used_bytes: tuple[int, ...] = ()
    """Memory used at each sample; empty where NVML does not report it (see `unknown`)."""
    mem_total_bytes: int | None = None
    util_pct: tuple[float, ...] = ()
    """Utilisation at each sample; empty where NVML does not report it (MIG instances)."""
    processes: tuple[tuple[int, int | None], ...] = ()
    """(pid, memory used or None where NVML cannot tell) of every compute process seen in the window."""
    processes_known: bool = True
    """False when the process list could not be read (see `unknown`): `processes` is then empty."""
    unknown: tuple[str, ...] = ()
    """One note per field NVML would not give, e.g. `memory: unified, not reported by NVML`."""
    unified: bool = False
    """The GPU shares the host's memory (GB10): memory comes from /proc/meminfo, not NVML."""
    host_mem_total_bytes: int | None = None
    host_mem_available_bytes: int | None = None
    """Filled for a unified-memory device only, from /proc/meminfo (MemTotal, MemAvailable)."""
    lost: str = ""
    """Why this GPU is gone (GpuIsLost, driver not loaded); empty for a GPU that answers."""


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
        gpus = loads(path.read_text())
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


class GpuLost(Exception):
    """NVML says the GPU (or the driver) is gone; str(e) is the reason."""


def _error_classes(pynvml: Any, names: tuple[str, ...]) -> tuple[type, ...]:
    return tuple(getattr(pynvml, n) for n in names if isinstance(getattr(pynvml, n, None), type))


def _call(pynvml: Any, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, str]:
    """(value, "") or (None, the error's name) for a quiet error; GpuLost for a lost GPU.

    Any other NVMLError (a bug of ours, a broken binding) propagates: the host reads unreachable
    with it, which is better than a made-up figure.
    """
    try:
        return fn(*args, **kwargs), ""
    except _error_classes(pynvml, LOST_ERRORS) as exc:
        raise GpuLost(f"{type(exc).__name__}: {exc}") from None
    except _error_classes(pynvml, QUIET_ERRORS) as exc:
        return None, type(exc).__name__


def _memory(pynvml: Any, handle: Any) -> tuple[Any, str]:
    """Memory info without the driver's reserved part (NVML v2) where the driver offers it."""
    try:
        info, error = _call(pynvml, pynvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
        if info is not None:
            return info, ""
    except GpuLost:
        raise
    except Exception:  # older drivers or bindings (no v2, a version mismatch): v1 counts reserved memory as used
        pass
    return _call(pynvml, pynvml.nvmlDeviceGetMemoryInfo, handle)


def _processes(pynvml: Any, handle: Any) -> tuple[list[tuple[int, int | None]] | None, str]:
    """Compute and MPS processes with their memory; (None, error) when the list cannot be read."""
    procs, error = _call(pynvml, pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
    if procs is None:
        return None, error
    mps, _ = _call(pynvml, pynvml.nvmlDeviceGetMPSComputeRunningProcesses, handle)  # unsupported on many drivers
    # usedGpuMemory is None where NVML cannot tell (NVML_VALUE_NOT_AVAILABLE, some containers)
    return [
        (int(p.pid), None if p.usedGpuMemory is None else int(p.usedGpuMemory)) for p in list(procs) + list(mps or [])
    ], ""


@dataclasses.dataclass
class _Gpu:
    """One GPU's samples as they accumulate over the window."""

    handle: Any
    mems: list[int] = dataclasses.field(default_factory=list)
    utils: list[float] = dataclasses.field(default_factory=list)
    procs: dict[int, int | None] = dataclasses.field(default_factory=dict)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)
    """field -> the error that left it unknown (the first seen)."""
    lost: str = ""

    def sample(self, pynvml: Any) -> None:
        if self.lost:
            return
        try:
            util, err_util = _call(pynvml, pynvml.nvmlDeviceGetUtilizationRates, self.handle)
            mem, err_mem = _memory(pynvml, self.handle)
            procs, err_procs = _processes(pynvml, self.handle)
        except GpuLost as exc:
            self.lost = str(exc)
            return
        for field, value, error in (("utilisation", util, err_util), ("memory", mem, err_mem)):
            if value is None:
                self.errors.setdefault(field, error)
        if util is not None:
            self.utils.append(float(util.gpu))
        if mem is not None:
            self.mems.append(int(mem.used))
        if procs is None:
            self.errors.setdefault("process list", err_procs)
            return
        for pid, used in procs:
            old = self.procs.get(pid)
            self.procs[pid] = used if old is None else max(old, used or 0)


def _read_nvml(window_s: float, sample_hz: float) -> list[GpuSample] | str:
    """Sample every GPU together for `window_s`; a reason string when NVML or GPUs are missing."""
    try:
        import pynvml
    except ImportError as exc:
        return f"no GPU: NVML unavailable ({type(exc).__name__}: {exc})"
    try:
        _call(pynvml, pynvml.nvmlInit)
    except GpuLost as exc:  # the NVML library is there, the driver is not: a GPU host that lost its GPUs
        return [GpuSample(index=-1, name="", lost=f"NVML: {exc}")]
    except Exception as exc:  # NVMLError_LibraryNotFound (a CPU host), ...
        return f"no GPU: NVML unavailable ({type(exc).__name__}: {exc})"
    try:
        gpus = _handles(pynvml)
        if not gpus:
            return "no GPU: NVML sees no device"
        num_samples = max(2, round(window_s * sample_hz))
        start = time.monotonic()
        for k in range(num_samples):
            for gpu in gpus:
                gpu.sample(pynvml)
            if k + 1 < num_samples:
                time.sleep(max(0.0, start + (k + 1) * window_s / (num_samples - 1) - time.monotonic()))
        return [_finish(pynvml, i, gpu) for i, gpu in enumerate(gpus)]
    finally:
        pynvml.nvmlShutdown()


def _handles(pynvml: Any) -> list[_Gpu]:
    gpus = []
    for i in range(pynvml.nvmlDeviceGetCount()):
        try:
            handle, _ = _call(pynvml, pynvml.nvmlDeviceGetHandleByIndex, i)
            gpus.append(_Gpu(handle=handle))
        except GpuLost as exc:
            gpus.append(_Gpu(handle=None, lost=str(exc)))
    return gpus


def _finish(pynvml: Any, index: int, gpu: _Gpu) -> GpuSample:
    """The window's samples as one GpuSample, with the card's name, UUID, total memory and notes."""
    if gpu.lost:
        return GpuSample(index=index, name="", lost=f"GPU {index} lost ({gpu.lost})")
    try:
        name, _ = _call(pynvml, pynvml.nvmlDeviceGetName, gpu.handle)
        uuid, _ = _call(pynvml, pynvml.nvmlDeviceGetUUID, gpu.handle)
        total, _ = _memory(pynvml, gpu.handle)
    except GpuLost as exc:
        return GpuSample(index=index, name="", lost=f"GPU {index} lost ({exc})")
    name = _text(name or "")
    # Unified memory is the host's: some GB10 drivers (or shims) answer the memory call with the host's
    # totals, whose OS share would read as a busy card. Its figures are not used either way.
    unified = any(n in name for n in UNIFIED_NAMES)
    notes = [
        UNIFIED_NOTE if unified and field == "memory" else f"{field}: not reported by NVML ({error})"
        for field, error in gpu.errors.items()
    ]
    if unified and "memory" not in gpu.errors:
        notes.append(UNIFIED_REPORTED_NOTE)
    host = host_memory() if unified else {}
    return GpuSample(
        index=index,
        name=name,
        uuid=_text(uuid or ""),
        mem_used_bytes=() if unified else tuple(gpu.mems),
        mem_total_bytes=None if total is None or unified else int(total.total),
        util_pct=tuple(gpu.utils),
        processes=tuple(sorted(gpu.procs.items())),
        processes_known="process list" not in gpu.errors,
        unknown=tuple(notes),
        unified=unified,
        host_mem_total_bytes=host.get("MemTotal"),
        host_mem_available_bytes=host.get("MemAvailable"),
    )


def host_memory(path: str = "/proc/meminfo") -> dict[str, int]:
    """MemTotal, MemAvailable ... of /proc/meminfo in bytes; empty where there is no such file."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key.strip()] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value
