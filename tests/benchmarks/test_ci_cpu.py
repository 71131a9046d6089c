"""benchmarks/ci_cpu.py's attribution: a process's CPU goes to the test its pytest worker ran when it started."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("ci_cpu", ROOT / "benchmarks" / "ci_cpu.py")
ci_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ci_cpu)


def proc(pid, ppid, first, last, cpu, *names):
    return {"pid": pid, "ppid": ppid, "first": first, "last": last, "cpu0_s": 0.0, "cpu_s": cpu, "names": list(names)}


def test_a_process_goes_to_the_test_its_pytest_worker_ran_and_a_long_lived_one_to_its_kind():
    spans = [
        {"test": "a.py::one", "t0": 0.0, "t1": 10.0, "own_cpu_s": 2.0, "pid": 100},
        {"test": "a.py::two", "t0": 10.0, "t1": 20.0, "own_cpu_s": 1.0, "pid": 100},
        {"test": "b.py::three", "t0": 0.0, "t1": 20.0, "own_cpu_s": 4.0, "pid": 200},
    ]
    processes = [
        proc(100, 1, 0.0, 20.0, 50.0, "python -u -c import sys;exec(eval(sys.stdin.readline()))"),  # its own: spans
        proc(110, 100, 1.0, 400.0, 9.0, "/x/raylet --node"),  # the session's raylet: long-lived
        proc(111, 110, 12.0, 15.0, 3.0, "ray::IDLE", "ray::execute"),  # a worker under it, started in test two
        proc(210, 200, 5.0, 8.0, 6.0, "python -m runner.cli sweep"),  # worker 200's CLI run
        proc(300, 1, 5.0, 6.0, 0.5, "ray::IDLE"),  # its parent gone before it was seen
    ]
    per_test, shared = ci_cpu.attribute(processes, spans)
    assert per_test == {"a.py::one": 2.0, "a.py::two": 4.0, "b.py::three": 10.0}
    assert shared == {"Ray daemon (long-lived)": 9.0, "Ray worker (no test found)": 0.5}


def test_kinds_read_from_command_lines_ray_renames():
    assert (
        ci_cpu.kind(["/venv/bin/python /venv/ray/_private/workers/default_worker.py --x", "ray::IDLE"]) == "Ray worker"
    )
    assert ci_cpu.kind(
        ["python -c import runpy, sys; runpy.run_path(sys.argv[1]) /r/probes/step/variants/preload.py"]
    ) == ("measurement server or fork")
    assert ci_cpu.kind(["/venv/bin/python /venv/bin/labprobe sweep --plan demo"]) == "labprobe CLI"
    assert ci_cpu.kind([]) == "kernel or unnamed"
