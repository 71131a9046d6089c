"""The store under faults: sweeps killed at random, vacuum at 0 days and compaction between them,
links planted in every folder of the store. Does anything outside the store change, and is the
store whole at the end?

    python benchmarks/fault_loop.py [--iterations 100] [--seed 1] [--work DIR] [--json FILE]

One store, one Ray head (`ray start --head`, labelled `labprobe.host=local`, started here, stopped
by pid at the end), a small CPU plan (mask, padding, bucket on the demo's checkpoints). Each iteration:
1. plant, in every folder of the store that has none yet, a symlink to a folder outside the store, a
   symlink to a file there, and a hard link to a file there (the outside files are 30 days old, so a
   vacuum at any retention would take them if it followed or counted them);
2. `labprobe sweep --force` through the head, and at random: nothing, SIGKILL of the driver at a random
   moment, SIGKILL of the driver right after its k-th result (mid-commit), or SIGKILL of a Ray worker;
3. every file of the store made two hours old (vacuum keeps anything younger than an hour), then
   `labprobe store compact` and `labprobe store vacuum --retention-days 0` (through runner.cli, in
   this process: the same code and lock as the command, without an interpreter start each time).
At the end: a sweep without kills finishes what is left, `store check` must exit 0, the outside
folder's manifest (every path, its kind, size, sha256, link text) must equal the one taken before
the first iteration, and the export's newest row per job must equal a clean store's (one sweep,
inline, no faults), column by column but for the ones that differ between any two runs (times, run ids).
Exit 0 when all three hold.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
LABPROBE = [sys.executable, "-m", "runner.cli"]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled"}
FAULTS = {"none": 0.2, "driver-random": 0.3, "driver-after-result": 0.3, "worker": 0.2}
"""How often each fault is drawn: nothing, SIGKILL of the driver at a random moment or right after a
result (mid-commit), SIGKILL of a Ray worker running a job."""
RAY_SHARE = 0.15
"""Share of the iterations without a worker kill that still go through Ray (the rest run `--inline`,
the same writer in the driver, twice as fast on 2 cores: Ray's workers import torch each sweep)."""
CHECK_EVERY = 10
"""`store check` every this many iterations, besides the one at the end."""
VOLATILE = {"run_id", "finished_at", "started_at", "wall_s", "env_json", "code_version"}
"""Columns that differ between two clean runs of the same job: left out of the comparison."""

CLUSTER = """\
store:
  root: {store}
hosts:
  - name: local
    address: 127.0.0.1
    gpus: 0
    checkpoints_root: {repo}/demo/checkpoints
    corpora_root: {repo}/demo
checkpoints:
  - {{name: qwen3-0.6b-base, path: qwen3-0.6b-base, weights: random}}
  - {{name: qwen3.5-0.8b, path: qwen3.5-0.8b, weights: random}}
corpora:
  - name: demo
    path: corpus.jsonl
plans:
  loop:
    - probe: mask
      hosts: [local]
      checkpoints: [qwen3-0.6b-base, qwen3.5-0.8b]
      config: {{seq_len: 128}}
    - probe: padding
      hosts: [local]
      checkpoints: [qwen3-0.6b-base]
      corpus: demo
    - probe: bucket
      hosts: [local]
      checkpoints: [qwen3-0.6b-base]
      corpus: demo
"""


class Head:
    """`ray start --head --block` in its own session and temp dir; `pids()` finds its processes."""

    def __init__(self, work: Path) -> None:
        self.temp_dir = tempfile.mkdtemp(prefix="lpfl-")  # short: Ray's socket paths have a length limit
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.log = open(work / "ray-head.log", "w")  # noqa: SIM115 - open for the head's lifetime
        cmd = [
            str(Path(sys.executable).parent / "ray"), "start", "--head", "--block", f"--port={self.port}",
            "--num-cpus=2", "--include-dashboard=false", f"--temp-dir={self.temp_dir}",
            "--disable-usage-stats", "--labels", "labprobe.host=local",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, env=ENV, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 120
        while "Ray runtime started" not in (work / "ray-head.log").read_text(errors="replace"):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("ray start --head did not start: see " + str(work / "ray-head.log"))
            time.sleep(0.5)

    def pids(self, *, busy_workers: bool = False) -> list[int]:
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                mine = os.getsid(int(entry.name)) == self.proc.pid or self.temp_dir.encode() in cmdline
            except OSError:
                continue
            # A worker running a job is titled ray::execute (the task's name), an idle one ray::IDLE; the
            # head's agents are ray::<Agent> too, and killing one takes the raylet down with it.
            if mine and (not busy_workers or cmdline.startswith(b"ray::execute")):
                out.append(int(entry.name))
        return out

    def stop(self) -> None:
        for _ in range(3):
            for pid in self.pids():
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.3)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def make_outside(folder: Path) -> None:
    """Files and a subfolder outside the store, 30 days old: what the planted links lead to."""
    (folder / "sub").mkdir(parents=True)
    for i in range(6):
        (folder / f"precious-{i}.parquet").write_bytes(os.urandom(4096))
        (folder / "sub" / f"deep-{i}.json").write_text(json.dumps({"i": i}))
    old = time.time() - 30 * 86400
    for path in [*folder.rglob("*"), folder]:
        os.utime(path, (old, old))


def manifest(folder: Path) -> dict[str, str]:
    """Every path under `folder` (not following links): its kind, size, sha256 or link text."""
    out = {}
    for path in sorted(folder.rglob("*")):
        st = path.lstat()
        rel = str(path.relative_to(folder))
        if stat.S_ISLNK(st.st_mode):
            out[rel] = "link " + os.readlink(path)
        elif stat.S_ISDIR(st.st_mode):
            out[rel] = "dir"
        else:
            out[rel] = f"file {st.st_size} {hashlib.sha256(path.read_bytes()).hexdigest()}"
    return out


def plant(store: Path, outside: Path) -> int:
    """Links to the outside in every folder of the store that holds none yet; -> how many planted."""
    planted = 0
    for folder, _dirs, _files in os.walk(store):  # os.walk does not follow links by default
        here = Path(folder)
        if (here / "zz-link-dir").is_symlink():
            continue
        os.symlink(outside, here / "zz-link-dir")
        os.symlink(outside / "precious-0.parquet", here / "zz-link-file.parquet")
        os.link(outside / f"precious-{planted % 6}.parquet", here / "zz-hard-link.parquet")
        planted += 3
    return planted


def age_store(store: Path, seconds: float) -> None:
    """Every regular file of the store `seconds` old, never through a link, never a hard-linked one
    (its other name is outside the store)."""
    then = time.time() - seconds
    for folder, _dirs, files in os.walk(store):
        for name in files:
            path = os.path.join(folder, name)
            st = os.lstat(path)
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                os.utime(path, (then, then), follow_symlinks=False)


def sweep(cluster: Path, head: Head, fault: str, rng: random.Random, *, force: bool = True, ray: bool = True) -> dict:
    """One sweep (through `head`, or `--inline local`), with `fault` applied; -> what happened."""
    argv = [*LABPROBE, "sweep", "--cluster", str(cluster), "--plan", "loop", "--timeout-s", "120"]
    argv += ["--connect-timeout-s", "120"]  # 2 loaded cores: connecting has taken over 30 s
    argv += (["--address", head.address] if ray else ["--inline", "local"]) + (["--force"] if force else [])
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    state = {"killed": None, "results": 0, "lines": []}
    reader = threading.Thread(target=_read, args=(proc, state), daemon=True)
    reader.start()
    kill_at = start + rng.uniform(1.0, 40.0 if fault == "driver-random" else 15.0)
    after_k = rng.randint(1, 3)
    while proc.poll() is None and state["killed"] is None:  # a fault is applied while the sweep runs
        time.sleep(0.05)
        if fault == "driver-after-result" and state["results"] >= after_k:
            time.sleep(rng.uniform(0.0, 0.3))  # lands in the next job's commits as often as not
            state["killed"] = _kill(proc.pid, "driver")
        elif fault == "driver-random" and time.monotonic() >= kill_at:
            state["killed"] = _kill(proc.pid, "driver")
        elif fault == "worker" and time.monotonic() >= kill_at:
            busy = head.pids(busy_workers=True)  # a worker running a task (not one idle in the pool)
            if busy:
                state["killed"] = _kill(rng.choice(busy), "worker")
    proc.wait()
    reader.join(timeout=10)
    return {
        "fault": fault,
        "ray": ray,
        "killed": state["killed"],
        "exit": proc.returncode,
        "results": state["results"],
        "wall_s": round(time.monotonic() - start, 1),
        "tail": "".join(state["lines"][-3:])[-400:],
    }


def _read(proc: subprocess.Popen, state: dict) -> None:
    for line in proc.stdout:
        state["lines"].append(line)
        state["results"] += " ok " in line or " failed " in line


def _kill(pid: int, what: str) -> str:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return what


def chore(*argv: str) -> tuple[int, str]:
    """A `labprobe store ...` command through runner.cli in this process: exit code and output."""
    from runner import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli.main(["store", *argv])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue() + err.getvalue()


def newest_rows(export: Path) -> dict[str, list[tuple]]:
    """Per exported table, the rows of each job's newest run (jobs: its newest row), as sorted
    tuples of the columns that two clean runs share."""
    import pandas as pd

    jobs = pd.read_parquet(export / "jobs.parquet").sort_values(["finished_at", "run_id"])
    newest = jobs.drop_duplicates("job_id", keep="last")
    keep = set(zip(newest["job_id"], newest["run_id"]))
    out = {}
    for path in sorted(export.glob("*.parquet")):
        frame = pd.read_parquet(path)
        frame = frame[[pair in keep for pair in zip(frame["job_id"], frame["run_id"])]]
        columns = sorted(c for c in frame.columns if c not in VOLATILE)
        out[path.stem] = sorted(tuple(str(v) for v in row) for row in frame[columns].itertuples(index=False))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--work", type=Path, help="folder to work in (default: a temporary one, removed)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="fault-loop-"))
    try:
        return run(work, args.iterations, args.seed, args.json)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


def run(work: Path, iterations: int, seed: int, json_out: Path | None) -> int:
    rng = random.Random(seed)
    store, outside, clean = work / "store", work / "outside", work / "clean"
    for path in (store, outside, clean):
        shutil.rmtree(path, ignore_errors=True)
    make_outside(outside)
    before = manifest(outside)
    cluster, clean_cluster = work / "cluster.yaml", work / "clean.yaml"
    cluster.write_text(CLUSTER.format(store=store, repo=REPO))
    clean_cluster.write_text(CLUSTER.format(store=clean, repo=REPO))
    head = Head(work)
    log, figures = [], {"iterations": iterations, "seed": seed, "faults": {}, "chore_failures": []}
    start = time.monotonic()
    try:
        for i in range(iterations):
            planted = plant(store, outside) if store.exists() else 0
            fault = rng.choices(list(FAULTS), weights=list(FAULTS.values()))[0]
            ray = fault == "worker" or rng.random() < RAY_SHARE
            event = {"i": i, "planted": planted, **sweep(cluster, head, fault, rng, ray=ray)}
            age_store(store, 2 * 3600)
            for action in (["compact"], ["vacuum", "--retention-days", "0"]):
                code, out = chore(action[0], "--store", str(store), "--cluster", str(cluster), *action[1:])
                event[action[0]] = code
                if code == 2 and "not a labprobe store" in out:  # killed before its first table: refused, right
                    event[action[0]] = "no store yet"
                elif code != 0:
                    figures["chore_failures"].append({"i": i, "action": action[0], "exit": code, "out": out[-600:]})
            event["outside_unchanged"] = manifest(outside) == before
            if i % CHECK_EVERY == CHECK_EVERY - 1:
                event["check"] = chore("check", "--store", str(store), "--cluster", str(cluster))[0]
            figures["faults"][fault] = figures["faults"].get(fault, 0) + 1
            log.append(event)
            print(json.dumps({k: v for k, v in event.items() if k != "tail"}), flush=True)
        figures["loop_wall_s"] = round(time.monotonic() - start, 1)
        figures["finish"] = sweep(cluster, head, "none", rng, force=False)
        # the reference needs no Ray: inline is the same writer with the same rows, at half the CPU on 2 cores
        figures["clean"] = sweep(clean_cluster, head, "none", rng, force=False, ray=False)
        figures["outside_unchanged_every_iteration"] = all(e["outside_unchanged"] for e in log)
        figures["checks_between"] = [e["check"] for e in log if "check" in e]
    finally:
        head.stop()
    check_code, check_out = chore("check", "--store", str(store), "--cluster", str(cluster))
    figures["check_exit"] = check_code
    figures["check_links_reported"] = check_out.count("\nlink: ")
    figures["outside_unchanged"] = manifest(outside) == before
    exports = {}
    for name, root, file in (("faults", store, cluster), ("clean", clean, clean_cluster)):
        code, out = chore("export", str(work / f"export-{name}"), "--store", str(root), "--cluster", str(file))
        exports[name] = newest_rows(work / f"export-{name}") if code == 0 else {"error": out[-400:]}
    figures["export_equal"] = exports["faults"] == exports["clean"]
    figures["export_rows"] = {t: len(r) for t, r in exports["faults"].items()}
    figures["kills"] = {k: sum(1 for e in log if e["killed"] == k) for k in ("driver", "worker")}
    figures["sweep_wall_s_median"] = sorted(e["wall_s"] for e in log)[len(log) // 2] if log else None
    figures["total_wall_s"] = round(time.monotonic() - start, 1)
    if not figures["export_equal"]:
        figures["export_diff"] = {
            t: [r for r in exports["faults"].get(t, []) if r not in exports["clean"].get(t, [])][:3]
            for t in set(exports["faults"]) | set(exports["clean"])
        }
    if figures["check_exit"] != 0:
        figures["check_out"] = check_out[-2000:]
    print(json.dumps({k: v for k, v in figures.items() if k not in ("finish", "clean")}, indent=1, default=str))
    if json_out is not None:
        json_out.write_text(json.dumps({"figures": figures, "log": log}, indent=1, default=str))
    ok = figures["check_exit"] == 0 and figures["outside_unchanged"] and figures["export_equal"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
