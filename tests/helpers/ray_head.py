"""A real Ray head for tests that need their own (token auth on, or one to kill): `ray start --head
--block` in its own session and temp dir; `kill()` ends every process of it by pid."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RAY = Path(sys.executable).parent / "ray"  # the venv's, beside its python


class RayHead:
    def __init__(self, *, env: dict[str, str], labels: str = "", num_cpus: int = 1, timeout_s: float = 90.0):
        self.temp_dir = tempfile.mkdtemp(prefix="lpray-")  # short: Ray's socket paths have a length limit
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        cmd = [
            str(RAY),
            "start",
            "--head",
            "--block",
            f"--port={self.port}",
            f"--num-cpus={num_cpus}",
            "--include-dashboard=false",
            # labprobe's drivers run log_to_driver=False: nothing reads what a log monitor would push (~3 CPU-s a node)
            "--include-log-monitor=false",
            f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats",
        ]
        if labels:
            cmd += ["--labels", labels]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        deadline = time.monotonic() + timeout_s
        seen = []
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            seen.append(line)
            if "Ray runtime started" in line:
                return
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError("ray start --head did not start:\n" + "".join(seen[-30:]))

    def pids(self) -> list[int]:
        """Every process of this head: its session, and whatever names its temp dir (workers)."""
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                in_session = os.getsid(int(entry.name)) == self.proc.pid
            except OSError:
                continue
            if in_session or self.temp_dir.encode() in cmdline:
                out.append(int(entry.name))
        return out

    def kill(self) -> None:
        for _ in range(3):  # processes may be forked while the first ones die
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


class RayNode:
    """A second node joining `head` (`ray start --address ... --block`) in its own session, with its own
    environment (an NVML double, CUDA_VISIBLE_DEVICES); `kill()` ends every process of its session by pid."""

    def __init__(self, head: RayHead, *, env: dict[str, str], labels: str, num_cpus: int = 1, num_gpus: int = 0):
        cmd = [
            str(RAY),
            "start",
            f"--address={head.address}",
            "--block",
            f"--num-cpus={num_cpus}",
            f"--num-gpus={num_gpus}",
            "--labels",
            labels,
            "--include-log-monitor=false",
            "--disable-usage-stats",
        ]
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
        )
        seen = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            seen.append(line)
            if "Ray runtime started" in line:
                return
            if not line and self.proc.poll() is not None:
                break
        self.kill()
        raise RuntimeError("ray start --address did not start:\n" + "".join(seen[-30:]))

    def pids(self) -> list[int]:
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getsid(int(entry.name)) == self.proc.pid:
                        out.append(int(entry.name))
                except OSError:
                    continue
        return out

    def kill(self) -> None:
        for _ in range(3):
            for pid in self.pids():
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.2)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()
