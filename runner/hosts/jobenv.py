"""What a job ran on: software versions and the GPU, collected on the host that runs the job.

Stored per job (`env_json` of the jobs table) so `compare` can warn when two hosts' rows came from
different torch/transformers/CUDA versions or different labprobe code (`code_version`, read on the
host from its own checkout: each host runs the probes from its own copy, which may lag the
driver's). `code_version()` run by the driver is also the code version stamped on every row.
`spare_collector()` readies the process a probe runs in (a Ray worker, an inline sweep, `labprobe probe`).
"""

from __future__ import annotations

import functools
import gc
import platform
import socket
import subprocess
from pathlib import Path

import probes

VERSION_KEYS = (
    "python",
    "torch",
    "transformers",
    "peft",
    "cuda",
    "driver",
    "gpu",
    "code_version",
    "harness",
    "harness_sha256",
    "harness_optimizer",
    "harness_autocast_dtype",
)
"""Keys whose difference between compared hosts deserves a warning."""


def base_env() -> dict[str, str]:
    """What every job row records of the machine, torch or not (purge records only this)."""
    return {"hostname": socket.gethostname(), "python": platform.python_version(), "platform": platform.platform()}


@functools.lru_cache(maxsize=1)
def collect_env() -> dict[str, str]:
    """python, torch, transformers, CUDA, NVIDIA driver, GPU name, hostname, the code version of this
    host's checkout. Cached per worker process."""
    import torch

    env = {
        **base_env(),
        "torch": str(torch.__version__),  # a TorchVersion would import torch wherever it is unpickled
        # read, not imported where the job has not imported them: importing peft costs ~3.7 CPU-s and transformers
        # ~1.4, in every Ray worker whose job (padding, bucket, a GPU job's checks) never uses them
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "cuda": torch.version.cuda or "",
        "driver": "",
        "gpu": "",
        "code_version": code_version(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["driver"] = _driver_version()
    return env


def spare_collector() -> None:
    """Freeze what this process holds before a probe runs out of Python's collector, once a process: its imports so
    far (torch, the runner, the probe's module, Ray's state in a worker; ~180k objects in a plain process after torch
    and the runner). The gc.collect() a probe runs between measurements (probes.step.train.models.release) then skips
    them. What the probe imports later (transformers, peft, dynamo) and makes is still walked: on a tiny profile run
    its full collections went from ~0.28 to ~0.16 s each, the run's own CPU from 8.1-10.4 to 7.0-8.0 CPU-s (four runs
    each way), and `labprobe probe profile` end to end a median 12.05 -> 11.00 CPU-s (benchmarks/RESULTS.md,
    2026-12-07). Garbage is collected first, so nothing dead is kept; what is frozen is what the process lives on
    (objects of it that die later with a cycle stay, once). A process that froze already (a test session) is left
    as it is."""
    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def _version(package: str) -> str:
    """The version of `package` as imported here, else as installed ("" when neither)."""
    import sys
    from importlib import metadata

    module = sys.modules.get(package)
    if module is not None and getattr(module, "__version__", None):
        return str(module.__version__)
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return ""


def _driver_version() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
            return version.decode() if isinstance(version, bytes) else str(version)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML on this host: the driver stays unknown, the job still runs
        return ""


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """`<package version>+g<commit>[.dirty]` of the checkout this process runs from; the version alone
    outside a git checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        base = version("labprobe")
    except PackageNotFoundError:
        base = "0+unknown"
    repo = Path(probes.__file__).resolve().parent.parent
    try:
        sha = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no", "--", "probes", "runner"],
            capture_output=True,
            text=True,
            timeout=5,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return base
    return f"{base}+g{sha}" + (".dirty" if dirty else "")


def harness_env(summary: dict) -> dict[str, str]:
    """What a GPU probe's summary says of the harness it measured through (probes.step.train.contract): its
    import path and source hash, and the step it gave: optimizer class, autocast dtype, fallbacks.
    Empty for a probe that runs no harness."""
    env = {k: str(v) for k, v in (summary.get("harness_env") or {}).items()}
    step = summary.get("harness_step") or {}
    if step:
        env["harness_optimizer"] = str(step.get("optimizer_class", step.get("optimizer", "")))
        env["harness_autocast_dtype"] = str(step.get("autocast_dtype"))
        env["harness_fallbacks"] = ",".join(summary.get("harness_fallbacks") or [])
    return env
