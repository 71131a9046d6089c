"""A sweep's orchestration: fingerprint each job's checkpoint on its host, skip what the store holds
ok, dispatch the rest (runner.dispatch.loop) with a progress bar per host, watch the Ray head.
`labprobe sweep` (runner.cli.sweep) parses the command line and prints; this module runs the plan."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TextIO

from runner.dispatch.launch import InlineLauncher, RayLauncher
from runner.dispatch.lock import SweepLock
from runner.dispatch.loop import Counts, Dispatch
from runner.hosts.nodes import (
    HostFailure,
    head_address,
    run_on_hosts,
)
from runner.hosts.reach import HeadWatch
from runner.lab.plan import Job, checkpoints_by_host
from runner.log import logger, say, terminal_err
from runner.store.fingerprint import Unreadable, fingerprints, host_fingerprints
from runner.store.store import Store

FINGERPRINT_TIMEOUT_S = 120.0


def run_sweep(
    *,
    cluster,
    store: Store,
    plan: str,
    jobs: list[Job],
    run_id: str,
    force: bool = False,
    deadline: float | None = None,
    timeout_s: float = 3600.0,
    gpu_wait_s: float = 1800.0,
    launcher=None,
    progress: bool = True,
    gpu_backoff_s: tuple[float, ...] | None = None,
    inline: bool = False,
    on_head_lost: Callable[[Counts], None] | None = None,
    lock: SweepLock | None = None,
) -> Counts:
    """Fingerprint, skip what is done, dispatch the rest. -> dispatch.Counts. Ray must be connected,
    unless `inline`: then every job runs here, in this process, as if this machine were the jobs' host
    (fingerprints and GPU readings taken here too). `on_head_lost`: called from a watch thread with the
    counts once the Ray head is gone and the run's unfinished jobs are stored failed; it must end the
    process (the main thread is blocked inside Ray by then). `lock`: told the plan's counts (status)."""

    ready, unreachable = fingerprint_jobs(jobs, here=inline)
    done = set() if force else store.done_job_ids(among=[j.job_id for j in ready])  # tonight's plan only
    todo = [j for j in ready if j.job_id not in done]
    if lock is not None:  # what `labprobe status` shows: this run's jobs, done and left
        lock.update(num_jobs=len(todo) + len(unreachable), already_done=len(ready) - len(todo))
    bar = Progress(todo + [j for j, _ in unreachable], enabled=progress, stream=terminal_err())
    hosts = {j.host for j in jobs}
    dispatch = Dispatch(
        cluster=cluster,
        store=store,
        run_id=run_id,
        plan=plan,
        launcher=launcher or (InlineLauncher(timeout_s=timeout_s) if inline else RayLauncher()),
        deadline=deadline,
        timeout_s=timeout_s,
        gpu_wait_s=gpu_wait_s,
        on_record=bar.update,
        gpu_backoff_s=gpu_backoff_s,
        live=(lambda: {h: (1, cluster.hosts[h].gpus) for h in hosts}) if inline else None,
        read_here=inline,
    )
    for job in ready:
        if job.job_id in done:
            dispatch.counts.add_done(job)
    watch = None
    if on_head_lost is not None:
        watch = HeadWatch(head_address(), lambda reason: (bar.close(), on_head_lost(dispatch.head_lost(reason))))
        watch.start()
    try:
        for job, reason in unreachable:
            dispatch.fail(job, reason)
        return dispatch.run(todo)
    finally:
        if watch is not None:
            watch.stop()
        bar.close()


def fingerprint_jobs(jobs: list[Job], *, here: bool = False) -> tuple[list[Job], list[tuple[Job, str]]]:
    """Each job with its host-computed checkpoint fingerprint (and so its job_id); jobs whose host
    is unreachable or cannot read the checkpoint come back apart, with the reason. `here`: computed
    in this process (an inline sweep, run on the host itself)."""

    by_host = checkpoints_by_host(jobs)
    if here:
        answers = {host: fingerprints(paths) for host, paths in by_host.items()}
    else:
        answers = run_on_hosts(host_fingerprints, sorted(by_host), by_host, timeout_s=FINGERPRINT_TIMEOUT_S)
    ready, unreachable = [], []
    for job in jobs:
        answer = answers[job.host]
        if isinstance(answer, HostFailure):
            unreachable.append((job.with_fingerprint(""), f"host {job.host}: {answer.reason}"))
            continue
        fp = answer.get(job.checkpoint, Unreadable("not fingerprinted: the host's answer left it out"))
        if isinstance(fp, Unreadable):
            unreachable.append((job.with_fingerprint(""), fp.reason))
        else:
            ready.append(job.with_fingerprint(fp))
    return ready, unreachable


class Progress:
    """A tqdm bar with per-host counts on a terminal; one log line per finished job otherwise (cron logs)."""

    def __init__(self, jobs: list[Job], *, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.total = {h: sum(j.host == h for j in jobs) for h in dict.fromkeys(j.host for j in jobs)}
        self.done = dict.fromkeys(self.total, 0)
        self.enabled, self.num_done, self.t0 = enabled, 0, time.monotonic()
        self.bar = None
        stream = stream or sys.stderr
        if enabled:
            hosts = ", ".join(f"{n} on {h}" for h, n in self.total.items()) or "none"
            say(f"labprobe sweep: {len(jobs)} job(s) to run ({hosts})")
        if enabled and stream.isatty() and jobs:
            from tqdm import tqdm

            self.bar = tqdm(total=len(jobs), unit="job", file=stream, dynamic_ncols=True)

    def update(self, job: Job, status: str) -> None:
        self.num_done += 1
        self.done[job.host] = self.done.get(job.host, 0) + 1
        hosts = " ".join(f"{h} {self.done[h]}/{n}" for h, n in self.total.items())
        if self.bar is not None:
            self.bar.set_postfix_str(hosts, refresh=False)
            self.bar.update(1)
        elif self.enabled:
            logger.info(
                f"[{self.num_done}/{sum(self.total.values())} {time.monotonic() - self.t0:5.1f}s] "
                f"{status:7} {job.probe} {job.checkpoint} @ {job.host}   ({hosts})"
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def night_outcome(counts: Counts) -> tuple[str, str]:
    """(outcome, reason) of a sweep that ran to its end, for its run record (runner.analysis.report_runs)."""
    if counts.store_failure is not None:
        return (
            "failed",
            f"the store stopped taking results ({counts.store_failure}); {counts.num_spilled} job(s) spilled",
        )
    late = sum(status == "skipped" and reason.startswith("deadline") for _, status, reason in counts.outcomes)
    if late:
        return "incomplete", f"the deadline passed with {late} job(s) not started (stored skipped)"
    if counts.failed:
        return "failed", f"{counts.failed} job(s) failed: {counts.failures[0][1]}" + (
            f" (and {counts.failed - 1} more)" if counts.failed > 1 else ""
        )
    return "ok", ""


def night_failure(exc: BaseException) -> tuple[str, str]:
    """(outcome, reason) of a sweep that stopped before its end: the cluster unreachable (bad input once the
    cluster file is valid: the night's failure), interrupted, or died of an error."""
    from probes.result import InputError

    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted (Ctrl-C or SIGINT) before its end"
    if isinstance(exc, InputError):
        return "failed", str(exc)
    if isinstance(exc, SystemExit):
        return "died", f"exited with status {exc.code} before its end"
    return "died", f"{type(exc).__name__}: {exc}".splitlines()[0]
