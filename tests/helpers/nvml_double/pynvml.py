"""A stand-in for nvidia-ml-py's `pynvml` that behaves like a chosen card: the one test double of the
project, standing for the NVIDIA driver that CI cannot have.

Same function names as the real module, and the real module's error classes and codes: it loads
the installed nvidia-ml-py under another name and raises `NVMLError(NVML_ERROR_...)` from it, so
`except pynvml.NVMLError_NotSupported` catches exactly what it would on a real GB10.

Put this folder first on the path (`PYTHONPATH=tests/helpers/nvml_double`, or sys.modules for an
in-process test) and name a scenario in env `LABPROBE_PYNVML_SCENARIO`: one of SCENARIOS, or a JSON
file `{"scenario": NAME}` or `{"devices": [...], "init": ...}` (read again at every nvmlInit, so a
test can turn a card busy while a sweep runs). Device fields: name, uuid; util (list of %, cycled
per call), memory ({"used": B, "total": B}), processes (list of [pid, bytes or null]), mps: each may
instead be an error name such as "NOT_SUPPORTED"; `lost` ("handle" or "util") raises GPU_IS_LOST there.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import sys
import types

_HERE = os.path.dirname(os.path.abspath(__file__))
_found = importlib.machinery.PathFinder.find_spec(
    "pynvml", [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
)
if _found is None:
    raise ImportError("the pynvml test double needs the real nvidia-ml-py installed (its error classes)")
# Under its own name: the real module builds its NVMLError_* classes on sys.modules[__name__].
_spec = importlib.util.spec_from_file_location("_pynvml_real", _found.origin)
_real = sys.modules.setdefault("_pynvml_real", importlib.util.module_from_spec(_spec))
if not hasattr(_real, "NVMLError"):
    _spec.loader.exec_module(_real)
globals().update({k: v for k, v in vars(_real).items() if k.startswith(("NVMLError", "NVML_", "nvmlMemory_"))})

ENV = "LABPROBE_PYNVML_SCENARIO"
GIB = 1024**3


def _gb10(util, processes):
    # GB10 (DGX Spark, ASUS Ascent GX10): memory calls NOT_SUPPORTED, the rest real (NOTES: gpustat 179, nvitop 208)
    return {
        "name": "NVIDIA GB10",
        "uuid": "GPU-gb10-0",
        "util": util,
        "memory": "NOT_SUPPORTED",
        "processes": processes,
    }


SCENARIOS = {
    "gb10-idle": {"devices": [_gb10([0], [])]},
    # pid 4242424: above Linux's largest possible pid_max (4,194,304), so no real process has it and its user
    # reads "?" (4242 did exist on a 2-core CI machine with pid_max 32,768, and read "root")
    "gb10-busy": {"devices": [_gb10([95], [[4242424, 20 * GIB]])]},
    "gb10-process-at-0pct": {"devices": [_gb10([0], [[4242424, 20 * GIB]])]},
    "gb10-nothing-readable": {"devices": [_gb10([0], "NO_PERMISSION")]},
    "mig": {
        "devices": [
            {
                "name": "NVIDIA H100 80GB HBM3",  # MIG mode on: no device utilisation, memory and processes real
                "uuid": "GPU-h100-mig",
                "util": "NOT_SUPPORTED",
                "memory": {"used": GIB // 4, "total": 80 * GIB},
                "processes": [],
            }
        ]
    },
    "gpu-lost": {"devices": [{"name": "NVIDIA H200", "uuid": "GPU-h200-0", "lost": "util"}]},
    "driver-not-loaded": {"init": "DRIVER_NOT_LOADED", "devices": []},
    "process-list-needs-permission": {
        "devices": [
            {
                "name": "NVIDIA L40S",
                "uuid": "GPU-l40s-0",
                "util": [0],
                "memory": {"used": 30 * GIB, "total": 48 * GIB},
                "processes": "NO_PERMISSION",
            }
        ]
    },
}

_state = {"devices": None, "calls": {}}


def _error(code: str) -> Exception:
    return _real.NVMLError(getattr(_real, f"NVML_ERROR_{code}"))


def _scenario() -> dict:
    name = os.environ.get(ENV, "")
    if name in SCENARIOS:
        return SCENARIOS[name]
    if not os.path.isfile(name):
        raise RuntimeError(f"pynvml test double: {ENV}={name!r} is neither a scenario nor a file")
    spec = json.loads(open(name).read())
    return SCENARIOS[spec["scenario"]] if "scenario" in spec else spec


def _device(handle) -> dict:
    if _state["devices"] is None:
        raise _error("UNINITIALIZED")
    return _state["devices"][handle.index]


def _field(handle, key: str, default=None):
    value = _device(handle).get(key, default)
    if isinstance(value, str):
        raise _error(value)
    return value


def nvmlInit() -> None:
    spec = _scenario()
    if spec.get("init"):
        raise _error(spec["init"])
    _state["devices"] = spec["devices"]


def nvmlShutdown() -> None:
    _state["devices"] = None


def nvmlDeviceGetCount() -> int:
    if _state["devices"] is None:
        raise _error("UNINITIALIZED")
    return len(_state["devices"])


def nvmlDeviceGetHandleByIndex(index: int):
    handle = types.SimpleNamespace(index=index)
    if _device(handle).get("lost") == "handle":
        raise _error("GPU_IS_LOST")
    return handle


def nvmlDeviceGetName(handle) -> str:
    return _device(handle)["name"]


def nvmlDeviceGetUUID(handle) -> str:
    return _device(handle).get("uuid", f"GPU-double-{handle.index}")


def nvmlDeviceGetUtilizationRates(handle):
    if _device(handle).get("lost") == "util":
        raise _error("GPU_IS_LOST")
    values = _field(handle, "util", [0])
    num = _state["calls"][handle.index] = _state["calls"].get(handle.index, -1) + 1
    return _real.c_nvmlUtilization_t(gpu=int(values[num % len(values)]), memory=0)


def nvmlDeviceGetMemoryInfo(handle, version=None):
    memory = _field(handle, "memory", {"used": 0, "total": 80 * GIB})
    return types.SimpleNamespace(used=memory["used"], total=memory["total"], free=memory["total"] - memory["used"])


def _procs(handle, key: str, default):
    return [types.SimpleNamespace(pid=pid, usedGpuMemory=mem) for pid, mem in _field(handle, key, default)]


def nvmlDeviceGetComputeRunningProcesses(handle):
    return _procs(handle, "processes", [])


def nvmlDeviceGetMPSComputeRunningProcesses(handle):
    return _procs(handle, "mps", "NOT_SUPPORTED")
