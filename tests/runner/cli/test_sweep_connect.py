"""`labprobe sweep` and `labprobe idle` against a Ray address where no usable head answers: each ends
within the bound with one line naming the address and the likely cause, exit 2, the store's lock free.

Each runs the real command in a fresh process (an in-process run would find the tests' shared Ray
already initialised and never connect); the addresses are real sockets of this machine."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_util import write_cluster

from runner.dispatch.lock import holder as lock_holder

PLANS = {"small": [{"probe": "mask", "config": {"seq_len": 64}, "hosts": ["gx10"], "checkpoints": ["qwen3-0.6b-base"]}]}
BOUND_S = 90.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def labprobe(*args: str, timeout_s: float = BOUND_S) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
    )
    return proc, time.monotonic() - t0


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    return write_cluster(tmp_path_factory.mktemp("lab"), PLANS)


def test_a_sweep_to_a_port_where_nothing_listens_ends_at_once_with_one_line(lab, tmp_path):
    address = f"127.0.0.1:{free_port()}"
    proc, took_s = labprobe(
        "sweep", "--cluster", str(lab), "--plan", "small", "--address", address, "--store", str(tmp_path)
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert address in line and "nothing listens there" in line, line
    assert proc.stdout == "" and took_s < BOUND_S
    assert lock_holder(tmp_path) is None and not (tmp_path / "tables" / "jobs").exists()


def test_idle_to_a_port_where_nothing_listens_ends_at_once_with_one_line(lab):
    address = f"127.0.0.1:{free_port()}"
    proc, took_s = labprobe("idle", "--cluster", str(lab), "--address", address)
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert address in line and "nothing listens there" in line, line
    assert took_s < BOUND_S


def test_a_listener_that_never_answers_is_given_up_after_the_connect_timeout(lab, tmp_path):
    with socket.socket() as silent:  # accepts connections (the kernel does), never speaks gRPC
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        proc, took_s = labprobe(
            "sweep",
            "--cluster",
            str(lab),
            "--plan",
            "small",
            "--address",
            address,
            "--store",
            str(tmp_path),
            "--connect-timeout-s",
            "4",
        )
    assert proc.returncode == 2, proc.stderr[-2000:]
    [line] = proc.stderr.strip().splitlines()
    assert address in line and "no Ray head answered within 4 s" in line, line
    assert took_s < 4 + 30  # the bound, plus this process's imports on a loaded 2-core machine
    assert lock_holder(tmp_path) is None


def test_an_address_without_a_port_number_is_one_line_exit_2(lab, tmp_path):
    proc, _ = labprobe(
        "sweep", "--cluster", str(lab), "--plan", "small", "--address", "127.0.0.1:notaport", "--store", str(tmp_path)
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "labprobe sweep: error: Ray address '127.0.0.1:notaport': expected HOST:PORT "
        "with a port 1-65535 (or `local` for the embedded Ray)"
    )
