"""What a job ran on: software versions and the GPU, collected on the host that runs the job.

Stored per job (`env_json` of the jobs table) so `compare` can warn when two hosts' rows came from
different torch/transformers/CUDA versions or different labprobe code (`code_version`, read on the
host from its own checkout: each host runs the probes from its own copy, which may lag the
driver's). `code_version()` run by the driver is also the code version stamped on every row.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import platform
import socket
import subprocess
import sys
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
    host's checkout.

    A job whose probe never imported torch (padding, bucket) is not made to, which cost its Ray worker ~2 CPU-s:
    torch's version and CUDA build are read from its installed files, and the job used no GPU, so `gpu` and
    `driver` are empty, as they are for any job whose torch sees no card (launch.execute imports the probe first)."""
    env = {
        **base_env(),
        "torch": _version("torch"),
        # read, not imported where the job has not imported them: importing peft costs ~3.7 CPU-s and transformers
        # ~1.4, in every Ray worker whose job (padding, bucket, a GPU job's checks) never uses them
        "transformers": _version("transformers"),
        "peft": _version("peft"),
        "cuda": "",
        "driver": "",
        "gpu": "",
        "code_version": code_version(),
    }
    torch = sys.modules.get("torch")
    if torch is None:
        return {**env, "cuda": _installed_cuda()}
    env["cuda"] = torch.version.cuda or ""
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
        env["driver"] = _driver_version()
    return env


def _installed_cuda() -> str:
    """torch.version.cuda of the installed torch, read from torch/version.py without importing torch ("" for a CPU
    build or no torch)."""
    spec = importlib.util.find_spec("torch")  # a top-level package: found, not imported
    if spec is None or not spec.submodule_search_locations:
        return ""
    path = Path(next(iter(spec.submodule_search_locations))) / "version.py"
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return ""
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) else getattr(node, "target", None)
        if isinstance(target, ast.Name) and target.id == "cuda" and isinstance(node.value, ast.Constant):
            return node.value.value or ""
    return ""


def _version(package: str) -> str:
    """The version of `package` as imported here, else as installed ("" when neither)."""
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
