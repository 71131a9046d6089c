"""The store over a simulated year (issue 14): is it still fast after 73,000 jobs, and after twice that?

    PYTHONPATH=. python benchmarks/bench_store.py [--nights 365] [--hosts 20] [--checkpoints 10] [--root DIR]

Builds a lab's store (benchmarks/store_history.py) through the store's writer: every night, 20
hosts x 10 checkpoints of carrier jobs (two `carrier.carriers` rows and one job row each, with
real-sized env/config/summary JSON),
written as one commit per table per night (Store.write_rows), then compacted and checkpointed as a
sweep does (Store.compact), vacuumed with 0 days retention every 30 nights to keep the disk small.
The history is a lab's: each checkpoint name holds a new checkpoint every night (a new fingerprint,
so new job ids: a sweep never reruns a job that is done), every 100th job of a night is `failed` and
reruns (same job id) ok the next night. At the size reached (the year, then twice it), measures:

- done-set: Store(root).done_job_ids(among=plan) from a fresh Store, what a sweep reads at its
  start. Tonight's plan: 20 hosts x 11 checkpoint names with new checkpoints (220 new job ids) plus
  last night's failed jobs (reruns); 40 of its jobs were stored per job earlier tonight by a sweep
  that stopped (so 40 are done, in small files not yet compacted). Measured so, then after
  compaction; with a pyarrow dataset filter (`job_id` isin) instead of DataFusion, for comparison;
  for a stress plan (as many ids, spread evenly over the whole history: bloom filters skip almost
  nothing); for 5,000 ids spread so (a plan past Store's FILTER_IDS: the pyarrow filter); in full
  (every job's newest run: the done-set before plans were passed); and per plan size, spread ids,
  DataFusion's read against the pyarrow filter (where FILTER_IDS comes from);
- latest rows: the newest ok job per slot and its `carrier.carriers` rows, as compare reads them;
- `labprobe compare --probe carrier` wall, the whole CLI in a fresh process (imports included);
- per-job commit: write_table (2 rows) + write_job of one job through the per-job writer, on top of
  the year, 200 of them (a night's worth) in a new run; the first job of the run is reported apart
  (it reads the run's already-stored job ids once).

Targets (issue 14): done-set <= 1 s, latest rows <= 2 s, compare <= 4 s, per-job commit <= 100 ms
median; at twice the jobs each within 1.5x. Prints one line per figure and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import pyarrow.compute as pc

from benchmarks import store_history as history
from benchmarks.store_history import CONFIG, ENV, build, log_files, night_records, tonight
from runner.store import delta
from runner.store.latest import JOB, latest_indices
from runner.store.store import SLOT, JobKey, Store


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def spread(root: Path, num: int) -> list[str]:
    """`num` job ids spread evenly over the whole history (the stress plan: every row group holds some)."""
    ids = list(dict.fromkeys(Store(root).jobs(columns=["job_id"])["job_id"]))
    return ids[:: max(1, len(ids) // num)][:num]


def done_pyarrow(root: Path, plan: list[str]) -> set[str]:
    """The plan's done-set read through a pyarrow dataset filter instead (min/max statistics only)."""
    table = Store(root).table("jobs")
    rows = delta.read(
        table, columns=["job_id", "status", "finished_at", "run_id"], filters=pc.field("job_id").isin(plan)
    )
    newest = rows.take(latest_indices(rows, JOB))
    return set(newest.filter(pc.equal(newest.column("status"), "ok")).column("job_id").to_pylist())


def done_datafusion(root: Path, plan: list[str]) -> set[str]:
    """The plan's done-set through DataFusion's read whatever the plan's size."""
    rows = delta.read_ids(Store(root).table("jobs"), ["job_id", "status", "finished_at", "run_id"], plan)
    newest = rows.take(latest_indices(rows, JOB))
    return set(newest.filter(pc.equal(newest.column("status"), "ok")).column("job_id").to_pylist())


def plan_sizes(root: Path) -> dict[int, tuple[float, float]]:
    """Plan size -> (DataFusion s, pyarrow filter s), medians of 3, spread ids."""
    out = {}
    for num in (222, 500, 1000, 2000, 5000):
        plan = spread(root, num)
        out[num] = tuple(
            statistics.median(timed(lambda fn=fn, plan=plan: fn(root, plan), 3))
            for fn in (done_datafusion, done_pyarrow)
        )
    return out


def done_sets(root: Path, plan: list[str], figures: dict, suffix: str = "") -> None:
    """Median seconds of the plan's done-set (fresh Store each), by DataFusion and by pyarrow."""
    figures["done_set_s" + suffix] = statistics.median(timed(lambda: Store(root).done_job_ids(among=plan), 5))
    figures["done_pyarrow_s" + suffix] = statistics.median(timed(lambda: done_pyarrow(root, plan), 5))


def measure(root: Path, night: int, hosts: int, checkpoints: int) -> dict:
    from runner.analysis.compare import JOB_READ_COLUMNS

    figures = {"load_1min": os.getloadavg()[0], "jobs_log_files": log_files(root)}
    plan = tonight(root, night, hosts, checkpoints)
    full = Store(root).done_job_ids()
    done = Store(root).done_job_ids(among=plan)
    assert done == full & set(plan) == done_pyarrow(root, plan), "a plan's done-set differs from the full one"
    figures.update(plan_jobs=len(plan), done_jobs=len(done), all_done_jobs=len(full))
    done_sets(root, plan, figures)
    stress, big = spread(root, len(plan)), spread(root, 5000)
    assert Store(root).done_job_ids(among=big) == full & set(big)
    figures["done_stress_s"] = statistics.median(timed(lambda: Store(root).done_job_ids(among=stress), 5))
    figures["done_5000_s"] = statistics.median(timed(lambda: Store(root).done_job_ids(among=big), 3))
    figures["done_full_s"] = statistics.median(timed(lambda: Store(root).done_job_ids(), 5))
    figures["plan_sizes"] = plan_sizes(root)
    Store(root).compact()  # tonight's stored jobs compacted into the history
    done_sets(root, plan, figures, "_compacted")

    def latest_rows():
        store = Store(root)
        jobs = store.latest_jobs("carrier", by=SLOT, columns=JOB_READ_COLUMNS)
        return store.read("carrier.carriers", jobs=jobs[jobs["status"] == "ok"])

    figures["latest_rows_s"] = statistics.median(timed(latest_rows, 5))
    figures["latest_rows"] = len(latest_rows())
    cli = [
        sys.executable,
        "-m",
        "runner.cli",
        "compare",
        "--probe",
        "carrier",
        "--store",
        str(root),
        "--cluster",
        "/nonexistent",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    walls = timed(lambda: subprocess.run(cli, check=True, capture_output=True, env=env, cwd=REPO), 3)
    figures["compare_cli_s"] = statistics.median(walls)
    figures.update(per_job_commits(root, night, hosts, checkpoints))
    Store(root).compact()  # leave it as a sweep would
    return figures


def per_job_commits(root: Path, night: int, hosts: int, checkpoints: int, num: int = 200) -> dict:
    store = Store(root)
    rows, jobs = night_records(night, hosts, checkpoints)
    walls, cpus = [], []  # wall time, and CPU time of this process (all its threads): less load-bound
    for job in jobs[:num]:
        fields = {
            k: job[k]
            for k in (
                "job_id",
                "probe",
                "host",
                "checkpoint",
                "checkpoint_fp",
                "config_hash",
                "code_version",
                "finished_at",
            )
        }
        key = JobKey(run_id=job["run_id"] + "-live", **fields)  # its own run: the next night's bulk build differs
        mine = [{k: v for k, v in r.items() if k not in job} for r in rows if r["job_id"] == key.job_id] or [{"x": 1.0}]
        t0, c0 = time.perf_counter(), time.process_time()
        store.write_table(key, "carriers", mine)
        store.write_job(
            key,
            status=job["status"],
            reason=job["reason"],
            started_at=job["started_at"],
            wall_s=job["wall_s"],
            summary=json.loads(job["summary_json"]),
            config=CONFIG,
            env=ENV,
            plan="nightly",
        )
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    rest = walls[1:]
    return {
        "jobs_log_files_after": log_files(root),
        "first_job_commit_s": walls[0],
        "per_job_commit_median_s": statistics.median(rest),
        "per_job_commit_p90_s": sorted(rest)[int(0.9 * len(rest))],
        "per_job_commits": len(walls),
        "per_job_commit_cpu_median_s": statistics.median(cpus[1:]),
    }


def week_of_log(tmp: Path, hosts: int, checkpoints: int) -> dict:
    """Per-job commits at the log's steady state: every commit lists the log folder, which holds the
    last 7 days of per-job commits (the log retention) whatever the store's age. Seven nights of
    per-job commits on a fresh store (no log file is older than the retention yet), then the 8th."""
    root = tmp / "week"
    for night in range(7):
        per_job_commits(root, night, hosts, checkpoints, num=hosts * checkpoints)
    return per_job_commits(root, 7, hosts, checkpoints, num=hosts * checkpoints)


def report(label: str, f: dict) -> None:
    print(
        f"{label}: load {f['load_1min']:.1f}; jobs log {f['jobs_log_files']} files; done-set of tonight's plan "
        f"({f['plan_jobs']} jobs, {f['done_jobs']} done) {f['done_set_s']:.3f} s (pyarrow filter "
        f"{f['done_pyarrow_s']:.3f} s), compacted {f['done_set_s_compacted']:.3f} s (pyarrow "
        f"{f['done_pyarrow_s_compacted']:.3f} s); stress plan {f['done_stress_s']:.3f} s, 5,000 ids "
        f"{f['done_5000_s']:.3f} s, full {f['done_full_s']:.3f} s ({f['all_done_jobs']:,} jobs done); by plan size "
        f"(DataFusion / pyarrow s): {', '.join(f'{n}: {a:.3f}/{b:.3f}' for n, (a, b) in f['plan_sizes'].items())}; "
        f"latest rows {f['latest_rows_s']:.3f} s ({f['latest_rows']} rows); compare CLI {f['compare_cli_s']:.2f} s; "
        f"per-job commit median {f['per_job_commit_median_s'] * 1e3:.0f} ms, p90 "
        f"{f['per_job_commit_p90_s'] * 1e3:.0f} ms over {f['per_job_commits']} (CPU median "
        f"{f['per_job_commit_cpu_median_s'] * 1e3:.0f} ms; first of the run "
        f"{f['first_job_commit_s'] * 1e3:.0f} ms; jobs log {f['jobs_log_files_after']} files after)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--checkpoints", type=int, default=10)
    parser.add_argument(
        "--root",
        type=Path,
        help="build here (default: a temporary folder, removed); with "
        "--years 2 the year's store is also kept, as DIR/year",
    )
    parser.add_argument(
        "--measure-only",
        type=int,
        metavar="NIGHTS",
        help="measure the store already built under --root (NIGHTS nights in it), build nothing: "
        "to measure again when the machine is quieter",
    )
    parser.add_argument("--years", type=int, choices=(1, 2), default=2, help="build and measure 1 or 2 years")
    parser.add_argument(
        "--week-log",
        action="store_true",
        help="only: per-job commits over a week of per-job log (the log's steady state)",
    )
    args = parser.parse_args()
    import deltalake
    import pandas
    import pyarrow

    print(
        f"python {sys.version.split()[0]}, deltalake {deltalake.__version__}, pyarrow {pyarrow.__version__}, "
        f"pandas {pandas.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    history.T0 = datetime.now(timezone.utc).replace(hour=1, minute=0, second=0, microsecond=0) - timedelta(
        days=2 * args.nights + 1
    )
    tmp = Path(tempfile.mkdtemp()) if args.root is None else args.root
    root = tmp / "store"
    if args.week_log:
        f = week_of_log(tmp, args.hosts, args.checkpoints)
        print(
            f"per-job commits over a week of log: load {os.getloadavg()[0]:.1f}; median "
            f"{f['per_job_commit_median_s'] * 1e3:.0f} ms, p90 {f['per_job_commit_p90_s'] * 1e3:.0f} ms, CPU median "
            f"{f['per_job_commit_cpu_median_s'] * 1e3:.0f} ms over {f['per_job_commits']}; jobs log "
            f"{f['jobs_log_files_after']} files after",
            flush=True,
        )
        return
    if args.measure_only:
        night = args.measure_only + 1000 + int(time.time() // 60) % 10_000  # a night not built, new each minute
        figures = measure(root, night, args.hosts, args.checkpoints)
        report(f"{args.measure_only} nights, measured again", figures)
        return
    try:
        years(root, tmp, args)
    finally:
        if args.root is None:
            shutil.rmtree(tmp, ignore_errors=True)


def years(root: Path, tmp: Path, args: argparse.Namespace) -> None:
    """Build the year (and the second), measuring each; the year's store kept as DIR/year under --root."""
    out = {}
    store = Store(root)
    per_night = args.hosts * args.checkpoints
    for label, first in (("year", 0), ("two years", args.nights))[: args.years]:
        took = build(store, first, args.nights, args.hosts, args.checkpoints)
        jobs = len(store.jobs(columns=["job_id"]))
        print(
            f"{label}: built {jobs:,} job rows ({first + args.nights} nights x {per_night} new jobs, and the reruns "
            f"of the failed ones) in {took:.0f} s",
            flush=True,
        )
        out[label] = measure(root, first + args.nights, args.hosts, args.checkpoints)
        out[label]["jobs"] = jobs + out[label]["per_job_commits"]
        report(label, out[label])
        if first == 0 and args.root is not None and args.years == 2:
            shutil.copytree(root, tmp / "year" / "store", dirs_exist_ok=True)  # for --root DIR/year --measure-only
    year, two = out["year"], out.get("two years", out["year"])
    for name in (
        "done_set_s",
        "done_set_s_compacted",
        "done_stress_s",
        "done_full_s",
        "latest_rows_s",
        "compare_cli_s",
        "per_job_commit_median_s",
    ):
        print(f"{name}: x{two[name] / year[name]:.2f} at twice the jobs (target <= 1.5)")
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
