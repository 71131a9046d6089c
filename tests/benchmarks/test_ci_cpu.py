"""benchmarks/ci_cpu.py's attribution: a process's CPU goes to the test its pytest worker ran when it started."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ci_cpu", ROOT / "benchmarks" / "ci_cpu.py")
ci_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_cpu)

XDIST = "/venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))"


def proc(pid, ppid, start_s, last_seen_s, cpu_s, *names):
    return {"pid": pid, "ppid": ppid, "start_s": start_s, "last_seen_s": last_seen_s, "cpu0_s": 0.0, "cpu_s": cpu_s,
            "names": list(names)}  # fmt: skip


SPANS = [
    {"test": "a.py::one", "start_s": 0.0, "end_s": 10.0, "own_cpu_s": 2.0, "pid": 100},
    {"test": "a.py::two", "start_s": 10.001, "end_s": 20.0, "own_cpu_s": 1.0, "pid": 100},
    {"test": "b.py::three", "start_s": 0.0, "end_s": 20.0, "own_cpu_s": 4.0, "pid": 200},
]


WORKER = "/venv/bin/python /venv/ray/_private/workers/default_worker.py"


def test_a_process_goes_to_the_test_its_pytest_worker_ran_and_a_long_lived_one_to_its_kind():
    processes = [
        proc(100, 1, -5.0, 400.0, 10.0, XDIST),  # 3.0 in its spans, 7.0 at start-up and collection
        proc(110, 100, 1.0, 400.0, 9.0, "/venv/ray/core/src/ray/raylet/raylet --node"),  # the session's: long-lived
        proc(111, 110, 12.0, 15.0, 3.0, WORKER, "ray::IDLE"),  # in test two, under the raylet
        proc(112, 110, 9.9, 11.0, 0.25, WORKER),  # late in test one
        proc(113, 110, 9.995, 11.0, 0.125, WORKER),  # within a tick of two's start (ticks round down): two's
        proc(114, 110, 10.005, 11.0, 0.5, WORKER),  # just after two started
        proc(115, 100, 20.005, 21.0, 0.0625, "/venv/bin/python -m runner.cli store check"),  # after its last test
        proc(200, 1, -5.0, 400.0, 4.0, XDIST),  # all of it in its one span
        proc(210, 200, 5.0, 8.0, 6.0, "/venv/bin/python -m runner.cli sweep"),  # the other worker's CLI run
        proc(211, 200, 15.0, 16.0, 1.5, "/venv/bin/python -m runner.cli status"),  # while worker 100 ran two
        proc(300, 1, 5.0, 6.0, 0.5, WORKER),  # its parent gone before it was seen
    ]
    per_test, shared = ci_cpu.attribute(processes, SPANS)
    assert per_test == {"a.py::one": 2.25, "a.py::two": 4.625, "b.py::three": 11.5}
    assert shared == {
        "pytest workers outside tests (start-up, collection, between tests)": 7.0,
        "Ray daemon (long-lived)": 9.0,
        "labprobe CLI (after or between tests)": 0.0625,
        "Ray worker (no pytest worker above it)": 0.5,
    }
    assert sum(per_test.values()) + sum(shared.values()) == pytest.approx(sum(p["cpu_s"] for p in processes))


def test_a_reused_pid_leads_to_the_parent_that_had_started_by_then():
    raylet = "/venv/ray/core/src/ray/raylet/raylet --node"
    processes = [
        proc(100, 1, -5.0, 400.0, 3.0, XDIST),
        proc(200, 1, -5.0, 400.0, 4.0, XDIST),
        proc(120, 100, 11.0, 30.0, 0.0, raylet),  # pid 120's second holder, started in a.py::two
        proc(120, 200, 1.0, 2.0, 0.0, raylet),  # its first, gone at 2.0
        proc(121, 120, 12.0, 13.0, 2.0, WORKER),  # the second holder's child
    ]
    per_test, _ = ci_cpu.attribute(processes, SPANS)
    assert per_test["a.py::two"] == 1.0 + 2.0 and per_test["b.py::three"] == 4.0


def test_kinds_read_from_the_program_its_script_and_rays_title():
    assert ci_cpu.kind(["/v/bin/python /v/ray/_private/workers/default_worker.py --x", "ray::execute"]) == "Ray worker"
    assert ci_cpu.kind(["/v/bin/python -u /v/ray/dashboard/agent.py --x", "ray::DashboardAgent"]) == "Ray daemon"
    assert ci_cpu.kind(["/v/bin/python -u /v/ray/_private/runtime_env/agent/main.py", "ray::RuntimeEnvAgent"]) == (
        "Ray daemon"
    )
    assert ci_cpu.kind(["/v/bin/python -u /v/ray/autoscaler/_private/monitor.py --logs-dir=/tmp"]) == "Ray daemon"
    server = "/v/bin/python -c import runpy, sys; runpy.run_path(sys.argv[1]) /r/probes/step/variants/preload.py"
    assert ci_cpu.kind([server]) == "measurement server or fork"
    assert ci_cpu.kind(["/v/bin/python /v/bin/labprobe sweep --plan demo"]) == "labprobe CLI"
    assert ci_cpu.kind(["/usr/lib/gcc/x86_64-linux-gnu/12/cc1plus -quiet -I /py/include/python3.11"]) == (
        "C++ compiler (Inductor)"
    )
    assert ci_cpu.kind(["as -I /py/include/python3.11 --64 -o k.o"]) == "C++ compiler (Inductor)"
    helper = "/v/bin/python -c import json, runpy, sys; p = runpy.run_path('/r/probes/step/variants/preload.py')"
    assert ci_cpu.kind([helper]) == "other Python"  # a test's script that loads the server's module
    raylets_fork = "/v/ray/core/src/ray/raylet/raylet --python_worker_command=default_worker.py"
    assert ci_cpu.kind([raylets_fork, WORKER, "ray::IDLE"]) == "Ray worker"  # first seen before it exec'd
    assert ci_cpu.kind(["/proc/self/exe --type=zygote", "/usr/lib/chromium/chromium --type=renderer"]) == "browser"
    assert ci_cpu.kind(["/v/bin/python -u -m pytest -n 2 tests"]) == "pytest"
    # a test's helper script: the pytest folder and Ray's module in its arguments make it neither
    helper = "/v/bin/python -c from ray._raylet import GcsClient; f('/tmp/pytest-of-root/pytest-1/test_x0')"
    assert ci_cpu.kind([helper]) == "other Python"
    assert ci_cpu.kind([XDIST]) == "pytest worker"
    assert ci_cpu.kind([]) == "kernel thread or unnamed"


@pytest.fixture
def no_pytest_run(monkeypatch):
    """Bad input must stop before the suite runs: a regression fails here at once instead of running it."""

    def refuse(*args, **kwargs):
        raise AssertionError(f"ran {args[0]}")

    monkeypatch.setattr(ci_cpu.subprocess, "run", refuse)


@pytest.mark.parametrize("argv", [["--interval-s", "0"], ["--interval-s", "-1"], ["--interval-s", "nan"]])
def test_an_interval_that_would_spin_the_poller_is_one_line_exit_2(argv, capsys, no_pytest_run):
    with pytest.raises(SystemExit) as exit_:
        ci_cpu.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and "--interval-s must be a positive number" in err and "Traceback" not in err


def test_an_out_that_is_a_file_is_one_line_exit_2(tmp_path, capsys, no_pytest_run):
    (tmp_path / "f").write_text("")
    with pytest.raises(SystemExit) as exit_:
        ci_cpu.main(["--out", str(tmp_path / "f")])
    assert exit_.value.code == 2 and "not a folder" in capsys.readouterr().err
