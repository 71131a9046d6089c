"""Launchers: where a job runs. One job function, two ways to call it (as optimum-benchmark's
launchers do): inline in this process (tests, debugging, the GPU box itself) or as a Ray task pinned
to the job's host with `label_selector`.

`execute` is what runs on the host: it checks the deadline at start (so a job queued before the
deadline never starts after it), reads GPU idleness at start for GPU jobs (refusing on a busy card),
fingerprints the checkpoint there, runs the probe and returns an `Outcome`. A probe's exception
becomes a failed Outcome with a one-line reason; only infrastructure failures (node death, worker
crash, cancellation) surface as Ray errors, which the Ray launcher turns into failed Outcomes too.
"""

from __future__ import annotations

import abc
import dataclasses
import signal
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable

from runner.dispatch.placement import skip_reason
from runner.gpu.cuda import NoCudaError, check_device
from runner.gpu.idle import GpuBusyError, GpuMisconfiguredError, GpuUnreadableError, Thresholds
from runner.gpu.idle import guard as idle_guard
from runner.hosts.jobenv import collect_env, harness_env, spare_collector
from runner.hosts.nodes import node_host, one_line, pinned
from runner.lab.plan import Job
from runner.store.fingerprint import fingerprint

DRAIN_S = 60.0
"""How long a cancelled GPU job's host stays busy at most, waiting for its worker to be killed."""


@dataclasses.dataclass(kw_only=True)
class Outcome:
    status: str
    """ok | failed | skipped."""
    reason: str = ""
    result: Any = None
    """The ProbeResult when ok."""
    env: dict[str, str] = dataclasses.field(default_factory=dict)
    checkpoint_fp: str = ""
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(timezone.utc))
    wall_s: float = 0.0
    misconfigured: bool = False
    """skipped: the job's card could not be judged (unreadable, or its assignment names no card NVML sees)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class GpuGuard:
    """What a GPU job placed on a GPU host checks at start: its card's idleness (waiting up to `wait_s`
    for a foreign process to leave it) and that torch runs on that card (runner.gpu.cuda)."""

    runs_dir: str | None = None
    thresholds: Thresholds | None = None
    wait_s: float = 0.0
    """How long the job waits on its card for a foreign process, counted from its start (when Ray
    gave it the card: a slot free of labprobe's own work)."""


def execute(job: Job, *, deadline: float | None = None, guard: GpuGuard | None = None) -> Outcome:
    """Run one job here (on its host). Never raises for a probe's own failure.

    `guard` is given for GPU jobs placed on a GPU host only: a GPU probe run on purpose on a CPU (a
    host without GPUs, tests with tiny models) is not checked."""
    started = datetime.now(timezone.utc)
    if deadline is not None and time.time() >= deadline:
        return Outcome(status="skipped", reason="deadline", started_at=started)
    device_env: dict[str, str] = {}
    if guard is not None:
        settled = _settle_gpu(job, guard, deadline, started)
        if isinstance(settled, Outcome):
            return settled
        device_env = settled
    t0 = time.perf_counter()
    env: dict[str, str] = dict(device_env)
    try:
        import probes

        # Imports (torch, transformers, the probe) happen before the clock starts: wall_s is the
        # probe's own run, comparable across hosts, not a fresh worker's start-up.
        env = {**collect_env(), "node_host": node_host(), **device_env}
        fp = fingerprint(job.paths["checkpoint"])
        module, config = probes.get(job.probe), job.probe_config()
        spare_collector()
        t0 = time.perf_counter()
        result = module.run(config)
        env.update(harness_env(result.summary))  # the harness's hash and versions: never read as host drift
    except Exception as exc:  # the probe's failure is this job's answer, not the sweep's
        return Outcome(
            status="failed",
            reason=one_line(exc),
            env=env,
            checkpoint_fp=job.checkpoint_fp,
            started_at=started,
            wall_s=time.perf_counter() - t0,
        )
    return Outcome(
        status="ok", result=result, env=env, checkpoint_fp=fp, started_at=started, wall_s=time.perf_counter() - t0
    )


def _settle_gpu(job: Job, guard: GpuGuard, deadline: float | None, started: datetime) -> dict[str, str] | Outcome:
    """The device env of a GPU job whose card is idle and is torch's cuda:0; else its Outcome: skipped
    (busy after its wait, or unreadable) or failed (torch cannot run on the card: no CPU timing stored)."""
    try:
        card = idle_guard(
            job.host, runs_dir=guard.runs_dir, thresholds=guard.thresholds, wait_s=guard.wait_s, deadline=deadline
        )
    except GpuBusyError as exc:
        unreadable = isinstance(exc, (GpuUnreadableError, GpuMisconfiguredError))
        reason = skip_reason(job.host, str(exc), unreadable=unreadable)
        return Outcome(status="skipped", reason=reason, started_at=started, misconfigured=unreadable)
    try:
        device = check_device(job.host, card, cards=list(card.seen))
    except NoCudaError as exc:
        return Outcome(status="failed", reason=f"no usable CUDA device: {exc}", started_at=started)
    return {
        **device.env(),
        "gpu_wait_s": f"{card.waited_s:g}",
        "gpu_wait_reason": card.wait_reason,
        "gpu_assigned": card.assigned or "",
    }


class Launcher(abc.ABC):
    """Submit jobs, then poll for their outcomes. Every wait is bounded."""

    @abc.abstractmethod
    def submit(self, job: Job, *, deadline: float | None, guard: GpuGuard | None = None) -> None: ...

    @abc.abstractmethod
    def poll(self, timeout_s: float) -> list[tuple[Job, Outcome]]:
        """Outcomes of finished jobs (maybe none), waiting at most `timeout_s`."""

    @abc.abstractmethod
    def in_flight(self) -> dict[str, list[Job]]:
        """host -> jobs submitted and not yet reported."""

    @abc.abstractmethod
    def abandon(self, host: str, reason: str) -> list[tuple[Job, Outcome]]:
        """Give up on `host`'s in-flight jobs (its node died): each becomes a failed Outcome."""

    def expire(self, timeout_s: float) -> list[tuple[Job, Outcome]]:
        """Jobs in flight longer than `timeout_s`, cancelled and failed."""
        return []

    def gpu_jobs(self) -> dict[str, int]:
        """host -> GPU jobs that may still hold one of its cards: in flight, or cancelled and not yet gone."""
        counts = {host: sum(j.gpu for j in jobs) for host, jobs in self.in_flight().items()}
        return {host: n for host, n in counts.items() if n}

    def gpu_hosts(self) -> set[str]:
        """Hosts where a GPU job may still be running."""
        return set(self.gpu_jobs())


class _JobTimeout(BaseException):
    """Raised by the inline launcher's alarm: a BaseException, so a probe's `except Exception` keeps it."""


class InlineLauncher(Launcher):
    """Runs each job at submit time in this process: no Ray, no parallelism. `timeout_s`: a job still
    running then is stopped by an alarm (SIGALRM, in the main thread) and failed as the Ray launcher
    fails it, with the same reason."""

    def __init__(self, *, timeout_s: float | None = None) -> None:
        self._done: list[tuple[Job, Outcome]] = []
        self._timeout_s = timeout_s
        self._running = False

    def submit(self, job: Job, *, deadline: float | None, guard: GpuGuard | None = None) -> None:
        self._done.append((job, self._execute(job, deadline=deadline, guard=guard)))

    def _execute(self, job: Job, *, deadline: float | None, guard: GpuGuard | None) -> Outcome:
        if self._timeout_s is None or threading.current_thread() is not threading.main_thread():
            return execute(job, deadline=deadline, guard=guard)  # signals reach the main thread only

        def expire(signum, frame) -> None:
            if self._running:  # the job has not returned yet: stop it where it is
                raise _JobTimeout

        previous = signal.signal(signal.SIGALRM, expire)
        self._running = True
        timed_out = Outcome(status="failed", reason=f"timeout: not finished within {self._timeout_s:g} s")
        started = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, self._timeout_s)
        try:
            outcome = execute(job, deadline=deadline, guard=guard)
            self._running = False
            # a native call the alarm could not interrupt ran past the time: failed as Ray's launcher fails it
            return timed_out if time.monotonic() - started > self._timeout_s else outcome
        except _JobTimeout:
            return timed_out
        finally:
            self._running = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    def poll(self, timeout_s: float) -> list[tuple[Job, Outcome]]:
        done, self._done = self._done, []
        if not done:
            time.sleep(timeout_s)  # nothing runs in the background: only a GPU wait gets here
        return done

    def in_flight(self) -> dict[str, list[Job]]:
        return {}

    def abandon(self, host: str, reason: str) -> list[tuple[Job, Outcome]]:
        return []


class RayLauncher(Launcher):
    """Each job a Ray task pinned to its host's node; GPU jobs take num_gpus=1 there, each in a
    fresh worker process."""

    def __init__(self, *, num_cpus: float = 1.0, fn: Callable[..., Outcome] = execute) -> None:
        """`fn`: the job function, `execute` or a wrapper with its signature (tests slow it down)."""
        import ray

        self._ray = ray
        self._remote = ray.remote(max_retries=0)(fn)  # a retry on a dead pinned node hangs
        # Ray gives GPU tasks max_calls=1 only when num_gpus is in the decorator, not in .options():
        # say it here, so no GPU job inherits the last one's CUDA context, cached memory or devices.
        self._gpu_remote = ray.remote(max_retries=0, num_gpus=1, num_cpus=0, max_calls=1)(fn)
        self._num_cpus = num_cpus
        self._pending: dict[Any, tuple[Job, float]] = {}
        self._draining: dict[Any, tuple[Job, float]] = {}  # GPU tasks cancelled, maybe not yet gone

    def submit(self, job: Job, *, deadline: float | None, guard: GpuGuard | None = None) -> None:
        # A GPU job takes one of its node's Ray GPUs: every card a slot, one job a card, across every
        # sweep and driver of the cluster (Ray's accounting); Ray sets the worker's CUDA_VISIBLE_DEVICES.
        remote, resources = (self._gpu_remote, {}) if job.gpu else (self._remote, {"num_cpus": self._num_cpus})
        ref = remote.options(**resources, **pinned(job.host)).remote(job, deadline=deadline, guard=guard)
        # A GPU job's timeout runs after its wait for a foreign process to leave its card.
        self._pending[ref] = (job, time.monotonic() + (guard.wait_s if guard is not None else 0.0))

    def poll(self, timeout_s: float) -> list[tuple[Job, Outcome]]:
        if not self._pending:
            time.sleep(min(timeout_s, 0.05))
            return []
        refs = list(self._pending)
        first, _ = self._ray.wait(refs, num_returns=1, timeout=timeout_s)  # back as soon as one is done...
        done = self._ray.wait(refs, num_returns=len(refs), timeout=0)[0] if first else []  # ...with all done
        out = []
        for ref in done:
            job, _ = self._pending.pop(ref)
            try:
                outcome = self._ray.get(ref, timeout=30)
            except Exception as exc:  # NodeDiedError, WorkerCrashedError, TaskCancelledError, OOM...
                outcome = Outcome(status="failed", reason=one_line(exc))
            out.append((job, outcome))
        return out

    def in_flight(self) -> dict[str, list[Job]]:
        out: dict[str, list[Job]] = {}
        for job, _ in self._pending.values():
            out.setdefault(job.host, []).append(job)
        return out

    def gpu_jobs(self) -> dict[str, int]:
        counts = super().gpu_jobs()
        if self._draining:
            gone = self._ray.wait(list(self._draining), num_returns=len(self._draining), timeout=0)[0]
            now = time.monotonic()
            for ref in [r for r, (_, t) in self._draining.items() if r in gone or now - t > DRAIN_S]:
                del self._draining[ref]
            for job, _ in self._draining.values():
                counts[job.host] = counts.get(job.host, 0) + 1
        return counts

    def _drop(self, refs: list, reason: str) -> list[tuple[Job, Outcome]]:
        out = []
        for ref in refs:
            job, _ = self._pending.pop(ref)
            try:
                self._ray.cancel(ref, force=True)
            except Exception:  # already gone with its node; the failure is recorded either way
                pass
            if job.gpu:  # its host counts as busy until the killed worker is really gone
                self._draining[ref] = (job, time.monotonic())
            out.append((job, Outcome(status="failed", reason=reason)))
        return out

    def abandon(self, host: str, reason: str) -> list[tuple[Job, Outcome]]:
        return self._drop([r for r, (job, _) in self._pending.items() if job.host == host], reason)

    def expire(self, timeout_s: float) -> list[tuple[Job, Outcome]]:
        now = time.monotonic()
        late = [r for r, (_, t0) in self._pending.items() if now - t0 > timeout_s]
        return self._drop(late, f"timeout: not finished within {timeout_s:g} s")
