"""The sweep's dispatch loop: jobs out to hosts, outcomes into the store the moment they arrive.

Failure is per job, never per sweep: a probe's exception, a node that dies (its in-flight and
queued jobs fail with the reason), a job past its timeout, a host no alive node carries (fails at
once: a label selector matching nothing would wait forever) all become stored `failed` jobs, and
the loop carries on. Every wait is bounded (ray.wait with a timeout; hosts re-checked each second).
Two failures do end a sweep early. A store that refuses a write: no further job is handed out (the
queued ones are `skipped`), and that result and every later one go to a spill file
(runner.dispatch.spill). A lost Ray head: `head_lost`, called from a watch thread while the loop
is blocked inside Ray, records the in-flight and queued jobs failed without a Ray call.

CPU jobs: per host, at most as many in flight as the host's nodes have CPUs, so a job's timeout
runs from (about) its real start and the deadline is checked before each start.
GPU jobs: every card a slot. A host runs at most as many GPU jobs at once as its alive nodes offer
Ray GPUs, each a Ray task taking one GPU: Ray assigns the card (CUDA_VISIBLE_DEVICES) and the job
runs there or not at all (runner.gpu.idle.guard waits for a foreign process to leave that card, up
to --gpu-wait-s, and never moves; runner.gpu.cuda refuses a torch that does not run on it). A host's
CPU jobs are held while any of its GPU jobs runs (they would steal the CPU threads that launch its
kernels: jitter in the measurement), and while a GPU job is due to be placed there (the host's
running CPU jobs drain, then it starts). A GPU job is submitted only when a card of its host reads
idle (runner.dispatch.placement, whose wait runs only while none of our own GPU jobs holds the host);
a GPU job cancelled at its timeout keeps its card's slot until its worker is gone. See
docs/gpu-queue.md.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from runner.dispatch.launch import GpuGuard, Launcher, Outcome
from runner.dispatch.placement import GpuPlacer, gpu_skip_kind, skip_reason
from runner.dispatch.spill import Spill
from runner.gpu.idle import Thresholds, read_offered
from runner.hosts.jobenv import code_version
from runner.hosts.nodes import HOST_LABEL, NodeWatch, one_line
from runner.lab.cluster import Cluster, IdleThresholds
from runner.lab.plan import Job
from runner.log import logger
from runner.store.store import JobKey, Store

HOST_CHECK_S = 1.0
POLL_S = 0.2


@dataclasses.dataclass
class Counts:
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    already_done: int = 0
    failures: list[tuple[Job, str]] = dataclasses.field(default_factory=list)
    outcomes: list[tuple[Job, str, str]] = dataclasses.field(default_factory=list)
    """(job, status, reason) of every job of the run, in order; status `already_done` for a job skipped
    because the store holds it ok."""
    unreadable: int = 0
    """GPU jobs skipped because their host's GPUs could not be read (not because they were busy)."""
    store_failure: str | None = None
    """Why the store stopped taking results mid-sweep (None: it took every one)."""
    spilled_to: Path | None = None
    num_spilled: int = 0
    """Jobs kept in `spilled_to` instead of the store."""
    gpu_waits: list[tuple[Job, str, float, str, str]] = dataclasses.field(default_factory=list)
    """(job, status, seconds waited for a foreign process, why, the card: `GPU i (uuid)` or "") of every GPU
    job placed on a GPU host, in order."""

    def add_done(self, job: Job) -> None:
        self.already_done += 1
        self.outcomes.append((job, "already_done", ""))

    def add(self, job: Job, status: str, reason: str) -> None:
        if status == "ok":
            self.ok += 1
        elif status == "failed":
            self.failed += 1
            self.failures.append((job, reason))
        elif status == "skipped":
            self.skipped += 1
            self.unreadable += gpu_skip_kind(reason) == "unreadable"
        else:
            raise ValueError(f"unknown job status {status!r}")
        self.outcomes.append((job, status, reason))


def gpu_wait_lines(counts: Counts) -> list[str]:
    """The summary's lines of GPU jobs: the card each ran on, how long it waited for foreign processes, why."""
    lines = []
    for job, status, waited_s, why, card in counts.gpu_waits:
        where = f" on {card}" if card else ""
        lines.append(
            f"  GPU job {status}: {job.probe} {job.checkpoint} @ {job.host}{where}: waited {waited_s:.0f} s: {why}"
        )
    return lines


class Dispatch:
    def __init__(
        self,
        *,
        cluster: Cluster,
        store: Store,
        run_id: str,
        plan: str,
        launcher: Launcher,
        deadline: float | None = None,
        timeout_s: float = 3600.0,
        gpu_wait_s: float = 1800.0,
        on_record: Callable[[Job, str], None] | None = None,
        live: Callable[[], dict[str, tuple[int, float]]] | None = None,
        gpu_backoff_s: tuple[float, ...] | None = None,
        read_here: bool = False,
    ) -> None:
        """`live`: host -> (CPUs, GPUs) of the hosts alive now (default: from Ray). `read_here`: read
        GPU idleness in this process (an inline sweep on the host itself), not by a pinned task."""
        self.cluster, self.store, self.run_id, self.plan = cluster, store, run_id, plan
        self.launcher, self.deadline, self.timeout_s = launcher, deadline, timeout_s
        self.counts = Counts()
        self.on_record = on_record or (lambda job, status: None)
        self.cpu_queues: dict[str, collections.deque[Job]] = collections.defaultdict(collections.deque)
        self.gpu_queue: collections.deque[Job] = collections.deque()
        self.capacity: dict[str, int] = {}
        self.gpus: dict[str, float] = {}
        self.waiting: dict[str, str] = {}  # job_id -> why its GPU host was not idle
        self.seen_alive: set[str] = set()
        self.live = live or _live_capacity
        self.node_watch = NodeWatch() if live is None else None  # Ray's listing lags a killed node by ~15 s
        self.gpu_wait_s = gpu_wait_s
        self.placer = _make_placer(deadline, gpu_wait_s, gpu_backoff_s, cluster if read_here else None)
        self.host_waits: dict[str, tuple[float, str]] = {}
        """job_id -> (seconds, why) its host had no idle card before the job was placed."""
        self.spill = Spill(run_id)
        self.store_failure: str | None = None
        """Why the store stopped taking results; from then on they go to `spill`, no job starts."""
        self.head_lost_reason: str | None = None
        self._lock = threading.RLock()  # the head-watch thread records too

    # -- recording ----------------------------------------------------------------------------
    def record(self, job: Job, outcome: Outcome) -> None:
        with self._lock:
            if self.head_lost_reason is None:  # after that, the head-watch thread has recorded everything
                self._record(job, outcome)

    def _record(self, job: Job, outcome: Outcome) -> None:
        key = JobKey(
            run_id=self.run_id,
            job_id=job.job_id,
            probe=job.probe,
            host=job.host,
            checkpoint=job.checkpoint,
            checkpoint_fp=outcome.checkpoint_fp or job.checkpoint_fp,
            config_hash=job.config_hash,
            code_version=code_version(),
            finished_at=datetime.now(timezone.utc),
        )
        status, reason = outcome.status, outcome.reason
        if self.store_failure is None:
            try:
                if status == "ok":
                    self.store.write_result(
                        key,
                        outcome.result,
                        started_at=outcome.started_at,
                        wall_s=outcome.wall_s,
                        env=outcome.env,
                        plan=self.plan,
                    )
                else:
                    self._write_row(key, job, outcome)
            except Exception as exc:  # disk full, read-only, a StoreError: no more jobs go out
                self.store_failure = f"store {self.store.root}: {one_line(exc)}"
                logger.error(
                    f"labprobe sweep: {self.store_failure}; no further job is handed out, results "
                    f"computed from now on go to {self.spill.path}"
                )
        if self.store_failure is not None:
            self._spill(key, job, outcome)
            self.counts.store_failure, self.counts.spilled_to = self.store_failure, self.spill.path
            self.counts.num_spilled = self.spill.num_jobs
        self.counts.add(job, status, reason)
        self.on_record(job, status)

    def _spill(self, key: JobKey, job: Job, outcome: Outcome) -> None:
        try:
            self.spill.add(
                key,
                status=outcome.status,
                reason=outcome.reason,
                started_at=outcome.started_at,
                wall_s=outcome.wall_s,
                env=outcome.env,
                config={**job.config, **job.paths},
                plan=self.plan,
                result=outcome.result if outcome.status == "ok" else None,
            )
        except OSError as exc:  # $TMPDIR refuses too: the job's outcome is only in this log line
            logger.error(
                f"labprobe sweep: could not keep {job.probe} {job.checkpoint} @ {job.host} "
                f"({outcome.status}) in {self.spill.path}: {one_line(exc)}"
            )

    def _write_row(self, key: JobKey, job: Job, outcome: Outcome) -> None:
        self.store.write_job(
            key,
            status=outcome.status,
            reason=outcome.reason,
            started_at=outcome.started_at,
            wall_s=outcome.wall_s,
            summary={},
            config={**job.config, **job.paths},
            env=outcome.env,
            plan=self.plan,
        )

    def fail(self, job: Job, reason: str, status: str = "failed") -> None:
        self.record(job, Outcome(status=status, reason=reason))

    # -- the loop -----------------------------------------------------------------------------
    def run(self, jobs: list[Job]) -> Counts:
        for job in jobs:
            (self.gpu_queue if job.gpu else self.cpu_queues[job.host]).append(job)
        last_check = 0.0
        while self._queued() or any(self.launcher.in_flight().values()):
            if self.store_failure is not None:
                self._skip_queued(f"not started: {self.store_failure}")
            if self.deadline is not None and time.time() >= self.deadline:
                self._skip_queued()
            if time.monotonic() - last_check >= HOST_CHECK_S:
                self._check_hosts()
                last_check = time.monotonic()
            self._fill_cpu()
            self._dispatch_gpu()
            for job, outcome in self.launcher.poll(POLL_S) + self.launcher.expire(self.timeout_s):
                self._handle(job, outcome)
        return self.counts

    def head_lost(self, reason: str) -> Counts:
        """Record every job in flight or queued as failed with `reason`, without a single Ray call
        (each would block: the head is gone), and stop recording anything after. Thread-safe."""
        with self._lock:
            if self.head_lost_reason is None:
                jobs = [j for js in self.launcher.in_flight().values() for j in js]
                jobs += [j for q in self.cpu_queues.values() for j in q] + list(self.gpu_queue)
                for job in jobs:
                    self._record(job, Outcome(status="failed", reason=reason))
                self.head_lost_reason = reason
            return self.counts

    def _queued(self) -> bool:
        return bool(self.gpu_queue) or any(self.cpu_queues.values())

    def _handle(self, job: Job, outcome: Outcome) -> None:
        if job.job_id in self.host_waits:
            self._note_gpu_wait(job, outcome)
        self.record(job, outcome)

    def _note_gpu_wait(self, job: Job, outcome: Outcome) -> None:
        """The GPU job's whole wait for foreign processes (its host's with no idle card, then its card's)
        into its row (env gpu_wait_s, gpu_wait_reason) and the summary (counts.gpu_waits)."""
        host_s, host_why = self.host_waits.pop(job.job_id)
        env = outcome.env
        card_s = float(env.get("gpu_wait_s") or 0.0)
        whys = [f"no card of {job.host} idle for {host_s:.0f} s ({host_why})"] if host_why else []
        if env.get("gpu_wait_reason"):
            whys.append(f"its card busy for {card_s:.0f} s ({env['gpu_wait_reason']})")
        if outcome.status == "skipped" and not env:  # busy to the end on its card: the reason says how long
            whys.append(outcome.reason)
        why = "; ".join(whys) or "none: its card read idle at once"
        card = f"GPU {env['gpu_index']} ({env.get('gpu_uuid', '')})" if env.get("gpu_index") else ""
        outcome.env = {**env, "gpu_wait_s": f"{host_s + card_s:.1f}", "gpu_wait_reason": why}
        self.counts.gpu_waits.append((job, outcome.status, host_s + card_s, why, card))

    def _skip_queued(self, reason: str = "deadline") -> None:
        for queue in list(self.cpu_queues.values()) + [self.gpu_queue]:
            while queue:
                job = queue.popleft()
                why = self.waiting.get(job.job_id)
                if reason == "deadline" and why and job.gpu and self.placer.unreadable(job.host):
                    self.fail(job, skip_reason(job.host, why, unreadable=True), status="skipped")
                    continue
                self.fail(
                    job, f"{reason} (waited for an idle GPU on {job.host}: {why})" if why else reason, status="skipped"
                )

    def _check_hosts(self) -> None:
        live = self.live()
        if self.node_watch is not None:
            working = set(self.cpu_queues) | {j.host for j in self.gpu_queue} | set(self.launcher.in_flight())
            for host in self.node_watch.dead(working & set(live)):
                live.pop(host)
        self.capacity = {h: cpus for h, (cpus, _) in live.items()}
        self.gpus = {h: gpus for h, (_, gpus) in live.items()}
        in_flight = self.launcher.in_flight()
        for host in set(self.cpu_queues) | {j.host for j in self.gpu_queue} | set(in_flight):
            if host in live:
                self.seen_alive.add(host)
                continue
            reason = (
                f"host {host}: its Ray node died or left (no alive node carries {HOST_LABEL}={host})"
                if host in self.seen_alive
                else f"host {host}: no alive Ray node carries {HOST_LABEL}={host}"
            )
            for job, outcome in self.launcher.abandon(host, reason):
                self.record(job, outcome)
            for job in _drain(self.cpu_queues.get(host)) + _take(self.gpu_queue, host):
                self.fail(job, reason)

    def _fill_cpu(self) -> None:
        in_flight = self.launcher.in_flight()
        held = self.launcher.gpu_hosts() | self._gpu_due()  # the host's GPU jobs run, or one is about to
        for host, queue in self.cpu_queues.items():
            if host in self.capacity and self.capacity[host] < 1:  # a 1-CPU task would pend forever there
                for job in _drain(queue):
                    self.fail(job, f"host {host}: its Ray node offers no CPU (started with --num-cpus=0?)")
            if host in held:
                continue
            running = sum(not j.gpu for j in in_flight.get(host, []))
            while queue and running < self.capacity.get(host, 0):
                self.launcher.submit(queue.popleft(), deadline=self.deadline)
                running += 1

    # -- GPU jobs -----------------------------------------------------------------------------
    def _gpu_due(self) -> set[str]:
        """Hosts with a queued GPU job that would be placed now (not backing off): their CPU jobs wait."""
        now = time.time()
        return {
            j.host
            for j in self.gpu_queue
            if self.cluster.hosts[j.host].gpus > 0
            and j.host in self.capacity
            and self.gpus.get(j.host, 0) >= 1
            and now >= self.placer.next_attempt_at(j.host)
        }

    def _dispatch_gpu(self) -> None:
        # A GPU job starts on a host with a free card slot (Ray GPUs of its alive nodes, less our GPU jobs
        # there) and no CPU job of ours running (held by _fill_cpu meanwhile, so they drain).
        running = self.launcher.gpu_jobs()
        cpu_busy = {h for h, jobs in self.launcher.in_flight().items() if any(not j.gpu for j in jobs)}
        for job in list(self.gpu_queue):
            host = self.cluster.hosts[job.host]
            if host.gpus == 0:
                self.gpu_queue.remove(job)
                self.fail(job, f"no GPU: host {job.host} has gpus: 0 in {self.cluster.path.name}", status="skipped")
            elif job.host in self.gpus and self.gpus[job.host] < 1:  # pending forever on a GPU-less node
                self.gpu_queue.remove(job)
                self.fail(
                    job,
                    f"host {job.host}: its Ray node offers no GPU (started without --num-gpus? "
                    f"see `labprobe host-command {job.host}`)",
                )
            elif job.host in self.capacity and job.host not in cpu_busy:
                if running.get(job.host, 0) >= int(self.gpus.get(job.host, 0)):
                    self.placer.behind_own_work(job.host)  # every card holds a job of ours: queued behind it
                    continue
                placed, why = self._place_gpu(job, alone=not running.get(job.host))
                if placed:
                    self.gpu_queue.remove(job)
                    running[job.host] = running.get(job.host, 0) + 1
                elif why:
                    self.waiting[job.job_id] = why
        for job in [j for j in self.gpu_queue if self.placer.expired(j.host)]:
            self.gpu_queue.remove(job)
            waited, _ = self.placer.waited(job.host)
            why = self.waiting.get(job.job_id) or self.placer.reason(job.host) or "no placement attempt succeeded"
            if waited:
                why += f" (waited {waited:.0f} s for a foreign process to leave; --gpu-wait-s {self.gpu_wait_s:g})"
            reason = skip_reason(job.host, why, unreadable=self.placer.unreadable(job.host))
            self.counts.gpu_waits.append((job, "skipped", waited, why, ""))
            self.fail(job, reason, status="skipped")

    def _place_gpu(self, job: Job, *, alone: bool) -> tuple[bool, str]:
        """Submit `job` to its host if a card of it reads idle. -> (placed, why not)."""
        runs_dir = self.cluster.runs_dir(job.host)
        thresholds = _thresholds(self.cluster.hosts[job.host].idle)
        if time.time() < self.placer.next_attempt_at(job.host):
            return False, ""
        waited = self.placer.waited(job.host)
        placed, why = self.placer.try_place(job.host, runs_dir=runs_dir, thresholds=thresholds, alone=alone)
        if placed:
            self.host_waits[job.job_id] = waited
            guard = GpuGuard(runs_dir=runs_dir, thresholds=thresholds, wait_s=self.gpu_wait_s)
            self.launcher.submit(job, deadline=self.deadline, guard=guard)
        return placed, why


def _make_placer(
    deadline: float | None, wait_s: float, backoff_s: tuple[float, ...] | None, read_here_for: Cluster | None
) -> GpuPlacer:
    kwargs: dict[str, Any] = {} if backoff_s is None else {"backoff_s": backoff_s}
    if read_here_for is not None:
        cluster = read_here_for
        kwargs["read"] = lambda host: read_offered(
            host, runs_dir=cluster.runs_dir(host), thresholds=_thresholds(cluster.hosts[host].idle)
        )
    return GpuPlacer(deadline=deadline, wait_s=wait_s, **kwargs)


def _thresholds(idle: IdleThresholds) -> Thresholds:
    """cluster.yaml's per-host idle thresholds as runner.gpu.idle.Thresholds."""
    return Thresholds.from_cluster(idle)


def _live_capacity() -> dict[str, tuple[int, float]]:
    """Alive hosts -> (CPUs, GPUs) their alive nodes offer Ray."""
    import ray

    cpus: dict[str, float] = {}
    gpus: dict[str, float] = {}
    for node in ray.nodes():  # one read a poll: the labels and the resources of the same snapshot
        host = (node.get("Labels") or {}).get(HOST_LABEL)
        if host and node.get("Alive"):
            resources = node.get("Resources", {})
            cpus[host] = cpus.get(host, 0.0) + resources.get("CPU", 0.0)
            gpus[host] = gpus.get(host, 0.0) + resources.get("GPU", 0.0)
    return {host: (int(cpus[host]), gpus[host]) for host in cpus}


def _drain(queue: collections.deque | None) -> list[Job]:
    out = list(queue or [])
    if queue is not None:
        queue.clear()
    return out


def _take(queue: collections.deque, host: str) -> list[Job]:
    out = [j for j in queue if j.host == host]
    for job in out:
        queue.remove(job)
    return out
