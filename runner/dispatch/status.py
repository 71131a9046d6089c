"""What is running on a store: the sweep holding its lock (run, plan, pid, host, start) and that run's
jobs stored so far and left, read from the lock file (runner.dispatch.lock) and the jobs table.
With no sweep running: the newest run's counts. Read-only: it never takes the lock."""

from __future__ import annotations

import dataclasses
from collections import Counter

import pyarrow.compute as pc

from runner.dispatch.lock import holder
from runner.store.store import Store


@dataclasses.dataclass(frozen=True)
class Status:
    running: dict | None
    """The lock holder's info (pid, host, run_id, plan, started_at, num_jobs, already_done), or None."""
    run_id: str | None
    """The running sweep's run, else the newest stored one (None: nothing stored)."""
    counts: dict[str, int]
    """This run's stored jobs by status (ok, failed, skipped)."""
    last: dict | None
    """The run's newest stored job (probe, checkpoint, host, status, finished_at)."""
    night: str | None = None
    """Why the run's night went wrong (its run record: the cluster unreachable, the deadline, died), set by
    the caller that reads run records (runner.analysis.report_runs.night_line)."""


def sweep_status(store: Store, *, newest: str | None = None) -> Status:
    """`newest`: the newest run the store knows when none is running (a night that stored no job, its
    cluster unreachable, included: runner.analysis.report_runs reads the run records); None: the newest
    run with a stored job."""
    running = holder(store.place)
    columns = ["run_id", "probe", "checkpoint", "host", "status", "finished_at"]
    run_id = (running or {}).get("run_id") or newest
    if run_id is None:
        jobs = store.jobs(columns=["run_id", "finished_at"])
        if jobs.empty:
            return Status(running, None, {}, None)
        run_id = jobs.sort_values("finished_at")["run_id"].iloc[-1]
    rows = _run_jobs(store, run_id, columns)
    counts = dict(Counter(rows["status"])) if not rows.empty else {}
    last = rows.sort_values("finished_at").iloc[-1].to_dict() if not rows.empty else None
    return Status(running, run_id, counts, last)


def _run_jobs(store: Store, run_id: str, columns: list[str]):
    return store.read("jobs", columns=columns, filters=pc.field("run_id") == run_id)


def render(status: Status, store_root) -> str:
    text = _render(status, store_root)
    return f"{status.night}\n{text}" if status.night else text


def _render(status: Status, store_root) -> str:
    stored = sum(status.counts.values())
    parts = ", ".join(f"{status.counts.get(s, 0)} {s}" for s in ("ok", "failed", "skipped"))
    if status.running is None:
        if status.run_id is None:
            return f"store {store_root}: no sweep running, no job stored yet"
        return f"store {store_root}: no sweep running; newest run {status.run_id}: {stored} job(s) stored ({parts})"
    info = status.running
    if not info:
        return f"store {store_root}: a sweep is starting (its lock has no holder info yet)"
    lines = [
        f"store {store_root}: sweep running: run {info.get('run_id')}, plan {info.get('plan')!r}, "
        f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started_at')}"
    ]
    planned = info.get("num_jobs")
    if planned is None:
        lines.append(f"  jobs: {stored} stored so far ({parts}); the plan is still being fingerprinted")
    else:
        left = max(planned - stored, 0)
        lines.append(
            f"  jobs: {stored} of {planned} done ({parts}), {left} left; "
            f"{info.get('already_done', 0)} already stored ok before this run"
        )
    if status.last:
        last = status.last
        lines.append(
            f"  last: {last['status']} {last['probe']} {last['checkpoint']} @ {last['host']} at {str(last['finished_at'])[:19]}"
        )
    return "\n".join(lines)
