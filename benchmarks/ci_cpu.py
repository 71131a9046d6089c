"""Where the test suite's CPU goes: pytest run under a poller of /proc, each process's CPU given to a test.

    python benchmarks/ci_cpu.py [--out DIR] [--interval-s 0.25] [-- PYTEST ARGS]

Without PYTEST ARGS it passes pytest the test arguments .ci/run passes (`-n 2 --dist loadfile tests`); the environment
is the caller's (.ci/run also sets RAY_AUTH_MODE=disabled and LABPROBE_REQUIRE_BROWSER=1). Run nothing else meanwhile:
every process that appears during the run is counted as the suite's.

Most of the suite's CPU is not pytest's own: Ray's daemons and workers, forked measurements, CLI runs in subprocesses,
the C++ compiler under Inductor, the S3 server. `/usr/bin/time` counts only the processes pytest waited for, and
--durations gives wall time shared with the other worker. Here a thread reads every process's CPU from /proc every
`--interval-s`. This module, loaded into pytest as a plugin (`-p benchmarks.ci_cpu`: it imports because pytest runs as
`python -m pytest` from the repository's root, and pytest-xdist gives its workers that sys.path), records each test's
span and its pytest worker's own CPU. A process goes to the test its pytest worker ran when the process started: its
start time is the kernel's, its pytest worker found through its parents. One living longer than LONG_S (the session's
Ray cluster, a measurement server kept between tests) is counted by its kind only.

The figures are a lower bound: a process that ends between two polls is missed, and each loses the CPU of its last
interval. Writes DIR/processes.json and DIR/tests.jsonl, and prints the figures as Markdown (CPU-s: user + system).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
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
"""A process alive this long served several tests: counted by kind, not given to the test that started it. Longer
than the longest test (130 s on 2026-12-07), so a test's own processes stay its own."""
SPANS_ENV = "LABPROBE_CI_CPU_SPANS"
"""The folder the plugin writes test spans to; unset, the plugin records nothing."""
_TICK = os.sysconf("SC_CLK_TCK")
"""/proc/<pid>/stat counts CPU and start times in these ticks a second."""


def _boot_s() -> float:
    """Seconds since boot on the clock /proc/<pid>/stat's start times count on (suspend included)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _own_cpu_s() -> float:
    t = os.times()
    return t.user + t.system


# --- the pytest plugin: each test's span and its pytest worker's own CPU, one JSON line a test -----------------


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Set-up, call and teardown of one test, where it runs (a pytest-xdist worker, never its controller)."""
    start_s, cpu_s = _boot_s(), _own_cpu_s()
    try:
        return (yield)
    finally:
        if folder := os.environ.get(SPANS_ENV):
            span = {"test": item.nodeid, "start_s": start_s, "end_s": _boot_s(), "pid": os.getpid()}
            span["own_cpu_s"] = _own_cpu_s() - cpu_s
            with open(Path(folder) / f"spans-{os.getpid()}.jsonl", "a") as out:
                out.write(json.dumps(span) + "\n")


# --- the poller -------------------------------------------------------------------------------------------------


def _read(pid: str) -> tuple[int, float, float] | None:
    """(parent pid, start time in boot seconds, CPU-s) of one process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
        fields = stat[stat.rindex(")") + 2 :].split()  # the command name may hold spaces and parentheses
        return int(fields[1]), int(fields[19]) / _TICK, (int(fields[11]) + int(fields[12])) / _TICK
    except (OSError, ValueError, IndexError):  # gone, or a zombie's stat half-written
        return None


def _cmdline(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:300]
    except OSError:
        return ""


class Poller(threading.Thread):
    """Every process seen: its parent, start, command lines (Ray renames its processes), last seen, CPU."""

    MAX_NAMES = 4
    """A Ray worker's titles: its command, ray::IDLE, the task it runs; more says nothing new."""

    def __init__(self, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.seen: dict[tuple[int, float], dict] = {}
        self.ready = threading.Event()
        """Set after the first pass: what that pass found ran before the suite (the kernel's threads, this shell)."""
        self.done = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.done.is_set():
                self._pass(_boot_s())
                self.ready.set()
                self.done.wait(self.interval_s)
        except BaseException as exc:  # main() says so rather than printing figures from a dead poller
            self.error = exc
            self.ready.set()

    def _pass(self, now_s: float) -> None:
        me = str(os.getpid())
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or pid == me:
                continue
            read = _read(pid)
            if read is None:
                continue
            ppid, start_s, cpu_s = read
            entry = self.seen.get((int(pid), start_s))
            if entry is None:
                before = not self.ready.is_set()
                # a process started during the suite counts from zero; one running before it, from now
                entry = {"pid": int(pid), "ppid": ppid, "start_s": start_s, "cpu0_s": cpu_s if before else 0.0}
                entry.update(names=[], before=before)
                self.seen[int(pid), start_s] = entry
            kernel_thread = ppid == 2 or pid == "2"  # kthreadd and its children: no command line to read
            if (
                not kernel_thread
                and len(entry["names"]) < self.MAX_NAMES
                and (name := _cmdline(pid))
                and (name not in entry["names"])
            ):
                entry["names"].append(name)
            entry["last_seen_s"], entry["cpu_s"] = now_s, cpu_s


# --- attribution ------------------------------------------------------------------------------------------------

_COMPILERS = {"g++", "gcc", "c++", "cc1plus", "collect2", "ld", "as"}


def kind(names: list[str]) -> str:
    """What a process was: its program and script from the last command line it ran (a fork shows its parent's
    until it execs, Chromium's children show /proc/self/exe), its Ray title if it took one. The order of the checks
    matters: Ray's agents title themselves `ray::`, as its workers do."""
    ran = [n for n in names if not n.startswith(("ray::", "/proc/self/exe"))]
    titles = [n for n in names if n.startswith("ray::")]
    words = (ran[-1] if ran else "").split()
    program = os.path.basename(words[0]) if words else ""
    args = words[1:]
    while args and args[0] in ("-u", "-E", "-I", "-s", "-B"):  # Python's flags before its script (Ray's `-u`)
        args = args[1:]
    script = os.path.basename(args[0]) if args and not args[0].startswith("-") else ""
    command, code = " ".join([program, *args[:2]]), " ".join(args)
    if titles and titles[-1].startswith(("ray::DashboardAgent", "ray::RuntimeEnvAgent")):
        return "Ray daemon"
    if titles or script == "default_worker.py":
        return "Ray worker"
    if not program:
        return "kernel thread or unnamed"
    if program in ("raylet", "gcs_server"):
        return "Ray daemon"
    if script in ("agent.py", "main.py", "log_monitor.py", "monitor.py", "dashboard.py") and "/ray/" in args[0]:
        return "Ray daemon"
    if script == "ray":
        return "Ray's CLI (ray start, ray stop)"
    if program in _COMPILERS:
        return "C++ compiler (Inductor)"
    if "import sys;exec(eval(" in code:  # pytest-xdist's worker, started through execnet
        return "pytest worker"
    if "-m pytest" in command:
        return "pytest"
    if "runpy.run_path(sys.argv[1]" in code and code.endswith("probes/step/variants/preload.py"):  # its launcher
        return "measurement server or fork"
    if "-m probes.step.variants.worker" in command:
        return "measurement worker"
    if "-m runner.cli" in command or script == "labprobe":
        return "labprobe CLI"
    if script == "moto_server":
        return "S3 server (moto)"
    if "chrom" in program:
        return "browser"
    return "other Python" if program.startswith("python") else program


def _test_at(spans: list[dict], start_s: float) -> str | None:
    """The test running when a process started (`spans`: one pytest worker's, by start); None after its last test
    or in a gap between two. Fixtures are set up and torn down within a test's span, so they count as its."""
    tick = 1.0 / _TICK  # a start time is whole ticks, rounded down: one tick before a span may be in it
    running = [s for s in spans if s["start_s"] - tick <= start_s <= s["end_s"]]
    return running[-1]["test"] if running else None  # the later of two spans within one tick: the test starting


def attribute(processes: list[dict], spans: list[dict]) -> tuple[dict[str, float], dict[str, float]]:
    """({test: CPU-s}, {bucket: CPU-s} of what no single test owns). A test's CPU: its pytest worker's own CPU
    during it, plus the processes started under it that lived at most LONG_S."""
    by_worker: dict[int, list[dict]] = collections.defaultdict(list)
    for span in sorted(spans, key=lambda s: s["start_s"]):
        by_worker[span["pid"]].append(span)
    by_pid: dict[int, list[dict]] = collections.defaultdict(list)  # a pid may be reused within a run (pid_max 32768)
    for p in sorted(processes, key=lambda p: p["start_s"]):
        by_pid[p["pid"]].append(p)
    per_test = collections.Counter()
    for span in spans:
        per_test[span["test"]] += span["own_cpu_s"]
    shared: collections.Counter = collections.Counter()

    def worker_of(process: dict) -> int | None:
        for _ in range(64):  # a Ray worker's chain: worker <- raylet <- pytest worker; 64 ends any cycle
            if process["pid"] in by_worker:
                return process["pid"]
            if process["ppid"] in by_worker:  # a pytest worker lives through the run: its pid is never reused
                return process["ppid"]
            # its parent: the process of that pid that had started by then (an earlier holder of a reused pid)
            earlier = [p for p in by_pid.get(process["ppid"], ()) if p["start_s"] <= process["start_s"]]
            if not earlier:
                return None  # its parent ended before the poller saw it (a daemon reparented to init)
            process = earlier[-1]
        return None

    for process in processes:
        cpu_s = process["cpu_s"] - process["cpu0_s"]
        if process["pid"] in by_worker:  # a pytest worker: what its spans did not count is the session's
            shared["pytest workers outside tests (start-up, collection, between tests)"] += cpu_s - sum(
                s["own_cpu_s"] for s in by_worker[process["pid"]]
            )
            continue
        worker = worker_of(process)
        test = _test_at(by_worker[worker], process["start_s"]) if worker is not None else None
        if test is not None and process["last_seen_s"] - process["start_s"] <= LONG_S:
            per_test[test] += cpu_s
        else:
            why = "no pytest worker above it" if worker is None else "long-lived" if test else "after or between tests"
            shared[f"{kind(process['names'])} ({why})"] += cpu_s
    return dict(per_test), dict(shared)


# --- the run ----------------------------------------------------------------------------------------------------


def table(rows: dict[str, float], head: str, limit: int) -> str:
    lines = [f"| {head} | CPU-s |", "|---|---|"]
    lines += [f"| {name} | {cpu_s:,.1f} |" for name, cpu_s in sorted(rows.items(), key=lambda r: -r[1])[:limit]]
    return "\n".join(lines)


def report(processes: list[dict], spans: list[dict], wall_s: float, code: int, tool_cpu_s: float = 0.0) -> str:
    suite = [p for p in processes if not p["before"]]
    others_s = sum(p["cpu_s"] - p["cpu0_s"] for p in processes if p["before"])
    by_kind: collections.Counter = collections.Counter()
    for p in suite:
        by_kind[kind(p["names"])] += p["cpu_s"] - p["cpu0_s"]
    per_test, shared = attribute(suite, spans)
    per_file: collections.Counter = collections.Counter()
    for test, cpu_s in per_test.items():
        per_file[test.split("::")[0]] += cpu_s
    total_s = sum(by_kind.values())
    head = (
        f"pytest exit {code}, {wall_s:,.1f} s wall, {len(spans)} tests. The {len(suite)} processes that appeared "
        f"during the run used {total_s:,.0f} CPU-s ({total_s / wall_s:.2f} cores on average): "
        f"{sum(per_test.values()):,.0f} given to tests, {sum(shared.values()):,.0f} to no single test. Processes "
        f"running before it (the kernel's threads, this shell) used {others_s:,.1f} CPU-s meanwhile, and this "
        f"tool's poller {tool_cpu_s:,.1f}."
    )
    return "\n\n".join(
        [
            head,
            table(by_kind, "process kind", 30),
            table(shared, "no single test's", 30),
            table(dict(per_file), "test file", 25),
            table(dict(per_test), "test", 30),
        ]
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for processes.json and tests.jsonl")
    parser.add_argument("--interval-s", type=float, default=0.25, help="between two reads of /proc")
    parser.add_argument("pytest_args", nargs="*", help="after --; default: the test arguments .ci/run passes")
    args = parser.parse_args(argv)
    if not args.interval_s > 0:  # 0, a negative or nan would spin the poller on a core the suite needs
        parser.error(f"--interval-s must be a positive number of seconds, not {args.interval_s}")
    if args.out is not None and args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a folder")
    out = args.out or Path(tempfile.mkdtemp(prefix="ci-cpu-"))
    out.mkdir(parents=True, exist_ok=True)
    spans_dir = Path(tempfile.mkdtemp(prefix="spans-", dir=out))  # a fresh one: a reused --out adds no old spans
    poller = Poller(args.interval_s)
    poller.start()
    poller.ready.wait()
    if poller.error is not None:
        raise SystemExit(f"ci_cpu: the /proc poller failed: {poller.error!r}")
    started_s = time.monotonic()
    command = [sys.executable, "-m", "pytest", "-p", "benchmarks.ci_cpu", *(args.pytest_args or CI_ARGS)]
    code = subprocess.run(command, cwd=REPO, env={**os.environ, SPANS_ENV: str(spans_dir)}, check=False).returncode
    wall_s = time.monotonic() - started_s
    poller.done.set()
    poller.join()
    if poller.error is not None:
        raise SystemExit(f"ci_cpu: the /proc poller stopped: {poller.error!r}")
    processes = list(poller.seen.values())
    spans = [json.loads(line) for path in sorted(spans_dir.glob("*.jsonl")) for line in path.read_text().splitlines()]
    (out / "processes.json").write_text(json.dumps(processes))
    (out / "tests.jsonl").write_text("".join(json.dumps(s) + "\n" for s in spans))
    own = os.times()  # this process, the poller's thread included; pytest is a child, not counted here
    print(report(processes, spans, wall_s, code, own.user + own.system))
    print(f"\nfiles: {out}")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
