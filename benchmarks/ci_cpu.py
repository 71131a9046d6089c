"""Where the test suite's CPU goes: pytest run under a poller of /proc, each process's CPU given to a test.

    python benchmarks/ci_cpu.py [--out DIR] [--interval-s 0.25] [-- PYTEST ARGS]

Without PYTEST ARGS it runs what .ci/run runs (`-n 2 --dist loadfile tests`). Most of the suite's CPU is not
pytest's own: Ray's daemons and workers, forked measurements, CLI runs in subprocesses, g++ under Inductor, the S3
server. `/usr/bin/time` counts only the processes pytest waited for, and --durations gives wall time shared with the
other worker. Here a thread reads every process's CPU from /proc every `--interval-s`; this module, loaded into
pytest as a plugin (`-p benchmarks.ci_cpu`), records each test's start, end and its pytest worker's own CPU. A process
is given to the test its pytest worker ran when the process started (found through its parents); one living longer
than LONG_S (the session's Ray cluster and its workers, a measurement server kept between tests) is counted by its
kind only. A process that ends between two polls is missed, and each loses the CPU of its last interval.

Writes DIR/processes.json and DIR/tests.jsonl, and prints the figures as Markdown (CPU-s: user + system).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CI_ARGS = ["-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", "tests"]
LONG_S = 150.0
"""A process alive this long served several tests: counted by kind, not given to the test that started it."""
CLOCK_ENV = "LABPROBE_CI_CPU_DIR"


# --- the pytest plugin: each test's span and its pytest worker's own CPU, one JSON line a test -----------------


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Runs where the test runs (a pytest-xdist worker, not its controller)."""
    folder = os.environ.get(CLOCK_ENV)
    t0, c0 = time.time(), _own_cpu_s()
    yield
    if folder:
        row = {"test": item.nodeid, "t0": t0, "t1": time.time(), "own_cpu_s": _own_cpu_s() - c0, "pid": os.getpid()}
        with open(Path(folder) / f"tests-{os.getpid()}.jsonl", "a") as out:
            out.write(json.dumps(row) + "\n")


# --- the poller -------------------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK")


def _read(pid: str) -> tuple[int, int, float] | None:
    """(parent pid, start tick, CPU-s) of one process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), int(fields[19]), (int(fields[11]) + int(fields[12])) / _TICK


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return ""


class Poller(threading.Thread):
    """Every process seen: its parent, command lines (Ray renames its workers), first and last seen, CPU."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.seen: dict[tuple[int, int], dict] = {}
        self.ready = threading.Event()
        """Set after the first pass: what that pass found ran before the suite (the kernel's threads, this shell)."""
        self.done = threading.Event()

    def run(self) -> None:
        me = str(os.getpid())
        while not self.done.is_set():
            now = time.time()
            for pid in os.listdir("/proc"):
                if not pid.isdigit() or pid == me:
                    continue
                read = _read(pid)
                if read is None:
                    continue
                ppid, start, cpu = read
                entry = self.seen.get((int(pid), start))
                if entry is None:
                    # a process started during the suite counts from zero; one that ran before, from now
                    before = not self.ready.is_set()
                    cpu0 = cpu if before else 0.0
                    entry = {"pid": int(pid), "ppid": ppid, "first": now, "cpu0_s": cpu0, "names": [], "before": before}
                    self.seen[int(pid), start] = entry
                if len(entry["names"]) < 4 and (name := _cmdline(pid)) and name not in entry["names"]:
                    entry["names"].append(name)
                entry["last"], entry["cpu_s"] = now, cpu
            self.ready.set()
            self.done.wait(self.interval_s)


# --- attribution ------------------------------------------------------------------------------------------------


def kind(names: list[str]) -> str:
    """What a process was, from its command lines."""
    text = " ".join(names)
    rules = (
        ("pytest worker", r"import sys;exec\(eval"),
        ("Ray worker", r"ray::|default_worker\.py"),
        ("Ray daemon", r"raylet|gcs_server|dashboard|runtime_env|log_monitor|monitor\.py"),
        ("measurement server or fork", r"preload\.py"),
        ("measurement worker", r"probes\.step\.variants\.worker"),
        ("labprobe CLI", r"runner\.cli|bin/labprobe"),
        ("g++ (Inductor)", r"cc1plus|g\+\+|collect2|/ld\b|-quiet -I"),
        ("S3 server (moto)", r"moto"),
        ("browser", r"chrom"),
        ("pytest", r"pytest"),
        ("other python", r"python"),
    )
    for label, pattern in rules:
        if re.search(pattern, text):
            return label
    return "other" if text else "kernel or unnamed"


def attribute(processes: list[dict], spans: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """({test: CPU-s}, {bucket: CPU-s} of what no single test owns). A test's CPU: its pytest worker's own CPU
    during it plus the processes started under it that ended within LONG_S."""
    by_worker: dict[int, list[dict]] = collections.defaultdict(list)
    for span in spans:
        by_worker[span["pid"]].append(span)
    by_pid = {p["pid"]: p for p in processes}
    per_test = collections.Counter({s["test"]: s["own_cpu_s"] for s in spans})
    shared: collections.Counter = collections.Counter()

    def worker_of(process: dict) -> int | None:
        pid = process["pid"]
        for _ in range(32):  # a Ray worker's chain: worker <- raylet <- pytest worker
            if pid in by_worker:
                return pid
            if pid not in by_pid:
                return None  # its parent ended before the poller saw the chain
            pid = by_pid[pid]["ppid"]
        return None

    for process in processes:
        cpu = process.get("cpu_s", 0.0) - process["cpu0_s"]
        if process["pid"] in by_worker or cpu <= 0:
            continue  # a pytest worker: its own CPU is in the spans
        label = kind(process["names"])
        worker = worker_of(process)
        test = next(
            (s["test"] for s in by_worker.get(worker, ()) if s["t0"] - 0.5 <= process["first"] <= s["t1"] + 0.5),
            None,
        )
        if test is None or process.get("last", process["first"]) - process["first"] > LONG_S:
            shared[f"{label} ({'long-lived' if test else 'no test found'})"] += cpu
        else:
            per_test[test] += cpu
    return dict(per_test), dict(shared)


# --- the run ----------------------------------------------------------------------------------------------------


def table(rows: list[tuple[str, float]], head: str, limit: int) -> str:
    lines = [f"| {head} | CPU-s |", "|---|---|"]
    lines += [f"| {name} | {cpu:,.1f} |" for name, cpu in sorted(rows, key=lambda r: -r[1])[:limit]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for processes.json and tests.jsonl")
    parser.add_argument("--interval-s", type=float, default=0.25)
    parser.add_argument("pytest_args", nargs="*", help="after --; default: .ci/run's")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="ci-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    clock = out / "clock"
    clock.mkdir(exist_ok=True)
    poller = Poller(args.interval_s)
    poller.start()
    poller.ready.wait()
    started = time.time()
    env = {**os.environ, CLOCK_ENV: str(clock)}
    pytest = [sys.executable, "-m", "pytest", "-p", "benchmarks.ci_cpu", *(args.pytest_args or CI_ARGS)]
    code = subprocess.run(pytest, cwd=REPO, env=env, check=False).returncode
    wall_s = time.time() - started
    poller.done.set()
    poller.join()
    processes = list(poller.seen.values())
    spans = [json.loads(line) for path in sorted(clock.glob("*.jsonl")) for line in path.read_text().splitlines()]
    (out / "processes.json").write_text(json.dumps(processes))
    (out / "tests.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    print(report(processes, spans, wall_s, code))
    print(f"\nfiles: {out}")
    return code


def report(processes: list[dict], spans: list[dict], wall_s: float, code: int) -> str:
    suite = [p for p in processes if not p["before"]]  # what ran before pytest is not the suite's
    by_kind: collections.Counter = collections.Counter()
    for p in suite:
        by_kind[kind(p["names"])] += p.get("cpu_s", 0.0) - p["cpu0_s"]
    per_test, shared = attribute(suite, spans)
    per_file: collections.Counter = collections.Counter()
    for test, cpu in per_test.items():
        per_file[test.split("::")[0]] += cpu
    total = sum(by_kind.values())
    return "\n\n".join(
        [
            f"pytest exit {code}, {wall_s:,.1f} s wall; the processes it started used {total:,.0f} CPU-s "
            f"({total / wall_s:.2f} cores on average), {len(suite)} processes, {len(spans)} tests",
            table(list(by_kind.items()), "process kind", 20),
            table(list(shared.items()), "no single test's", 20),
            table(list(per_file.items()), "test file", 25),
            table(list(per_test.items()), "test", 30),
        ]
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
