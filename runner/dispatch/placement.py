"""Placing GPU jobs on a host whose cards really read idle, with per-host backoff and a wait bounded
from when the host could first run one.

The sweep asks `try_place(host)` before it submits a GPU job there (only when the host has a free
card slot: runner.dispatch.loop counts them). A host with no card reading idle, without NVML, or
unreachable is backed off (2, 5, 15, 30, 60 s by default, then 60 s each time) and asked again no
sooner than `next_attempt_at(host)`. An idle reading resets the host's backoff.

The wait is the host's own: its clock starts at the first refusal while none of labprobe's own GPU
jobs runs there (a slot free of our own work, held by someone else's process) and stops when a job
is placed, or when our own work holds the host again (`behind_own_work`): a job queued behind our
own job is never skipped as "no idle GPU". Once `expired(host)` (the host's clock past `wait_s`, or
the sweep's deadline), the sweep records the host's waiting jobs `skipped` with `reason(host)`.

Unreadable is not busy: a host whose GPUs could not be read (its Ray task failed, NVML reports a
GPU lost or nothing to judge by, no NVML at all on a host said to have GPUs) is backed off the
same way, but its skipped jobs say "could not be read" (`skip_reason`), and the sweep exits
non-zero over them; a host that stayed busy is a finding of the morning report, not an error.
"""

from __future__ import annotations

import time
from typing import Callable

from runner.gpu.idle import GpuReading, Thresholds, describe, read_offered
from runner.hosts.nodes import HostFailure, run_on_hosts

UNREADABLE = "could not be read before the deadline"
BUSY = "no idle GPU on"
READ_TIMEOUT_S = 30.0
"""A reading takes the sampling window plus a task round trip; more than this means the host is stuck."""


def skip_reason(host: str, why: str, *, unreadable: bool) -> str:
    """The reason a GPU job skipped at the deadline records; gpu_skip_kind() reads it back."""
    if unreadable:
        return f"GPU host {host} {UNREADABLE}: {why}"
    return f"{BUSY} {host} before the deadline: {why}"


def gpu_skip_kind(reason: str) -> str | None:
    """ "unreadable", "busy" or None (not a GPU job skipped at the deadline) for a stored reason."""
    if UNREADABLE in reason:
        return "unreadable"
    if reason.startswith(BUSY) or "(waited for an idle GPU on" in reason:
        return "busy"
    return None


class GpuPlacer:
    def __init__(
        self,
        *,
        deadline: float | None,
        wait_s: float = 1800.0,
        backoff_s: tuple[float, ...] = (2, 5, 15, 30, 60),
        clock: Callable[[], float] = time.time,
        read: Callable[[str], list[GpuReading]] | None = None,
    ):
        if not backoff_s or any(b < 0 for b in backoff_s):
            raise ValueError(f"backoff_s: needs at least one delay, none negative (got {backoff_s})")
        self.deadline = deadline
        self.wait_s = wait_s
        self.backoff_s = tuple(backoff_s)
        self._clock = clock
        self._read = read
        self._failures: dict[str, int] = {}
        self._next_at: dict[str, float] = {}
        self._reasons: dict[str, str] = {}
        self._unreadable: set[str] = set()
        self._since: dict[str, float] = {}
        """host -> when its wait for a foreign process began (a slot free of our own work, no idle card)."""
        self._first_reason: dict[str, str] = {}

    def try_place(
        self, host: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None, alone: bool = True
    ) -> tuple[bool, str]:
        """(True, "") when some GPU of `host` reads idle now; else (False, why) and the host backs off.
        `alone`: none of labprobe's own GPU jobs runs on the host (else its clock does not run).

        Asked while the host is still backing off, it answers (False, ...) without reading.
        """
        now = self._clock()
        if now < self._next_at.get(host, now):
            return False, (
                f"{host}: backing off for {self._next_at[host] - now:.0f} s more (last: {self._reasons.get(host, '')})"
            )
        kind, reason = self._judge(host, runs_dir, thresholds)
        if kind == "idle":
            for table in (self._failures, self._next_at, self._reasons, self._since, self._first_reason):
                table.pop(host, None)
            self._unreadable.discard(host)
            return True, ""
        self.refused(host, reason, unreadable=kind == "unreadable", alone=alone)
        return False, reason

    def waited(self, host: str) -> tuple[float, str]:
        """(seconds, why) `host` has waited for a foreign process so far: what a job placed now waited."""
        since = self._since.get(host)
        if since is None:
            return 0.0, ""
        return max(0.0, self._clock() - since), self._first_reason.get(host, "")

    def refused(self, host: str, reason: str, *, unreadable: bool = False, alone: bool = True) -> None:
        """`host` read busy (or its GPUs could not be read: `unreadable`): ask it again later."""
        if unreadable:
            self._unreadable.add(host)
        else:
            self._unreadable.discard(host)
        now = self._clock()
        if alone:
            self._since.setdefault(host, now)
            self._first_reason.setdefault(host, reason)
        else:
            self.behind_own_work(host)
        num = self._failures.get(host, 0)
        self._failures[host] = num + 1
        at = now + self.backoff_s[min(num, len(self.backoff_s) - 1)]
        # Waking past the end of the wait helps nobody: the sweep wakes then to record the skip.
        self._next_at[host] = min(at, self._ends_at(host))
        self._reasons[host] = reason

    def behind_own_work(self, host: str) -> None:
        """labprobe's own GPU jobs hold `host`: its queued jobs wait behind them, not for anyone else."""
        self._since.pop(host, None)
        self._first_reason.pop(host, None)

    def next_attempt_at(self, host: str) -> float:
        """When `host` may be asked again; 0.0 for a host that is not backing off.

        Not "now" for such a host: `clock() < next_attempt_at(h)` would then hold whenever the clock
        ticked between the two reads, and the host would never be tried.
        """
        return self._next_at.get(host, 0.0)

    def reason(self, host: str) -> str:
        """Why `host` was last refused ("" when it was not): the reason a skipped job records."""
        return self._reasons.get(host, "")

    def unreadable(self, host: str) -> bool:
        """True when the last look at `host` could not read its GPUs (not: found them busy)."""
        return host in self._unreadable

    def expired(self, host: str | None = None) -> bool:
        """The sweep's deadline passed; or, with `host`, its wait for a foreign process ran out too."""
        if host is None:
            return self.deadline is not None and self._clock() >= self.deadline
        return self._clock() >= self._ends_at(host)

    def _ends_at(self, host: str) -> float:
        ends = [self.deadline] if self.deadline is not None else []
        if host in self._since:
            ends.append(self._since[host] + self.wait_s)
        return min(ends, default=float("inf"))

    def _judge(self, host: str, runs_dir: str | None, thresholds: Thresholds | None) -> tuple[str, str]:
        """("idle" | "busy" | "unreadable", why not idle)."""
        try:
            readings = self._read(host) if self._read is not None else self._ray_read(host, runs_dir, thresholds)
        except Exception as exc:  # a reader that fails is an unreachable host, not a crash of the sweep
            return "unreadable", f"{host}: unreachable: {type(exc).__name__}: {exc}"
        if isinstance(readings, str):
            return "unreadable", readings
        wrong = {r.node_host for r in readings if r.node_host and r.node_host != host}
        if wrong:
            return "unreadable", f"{host}: read on a node labelled {sorted(wrong)}, not {host}"
        if any(r.verdict == "idle" for r in readings):
            return "idle", ""
        # Only a card seen busy makes the host busy; unreachable or GPU-less readings leave it unread.
        kind = "busy" if any(r.verdict == "busy" for r in readings) else "unreadable"
        return kind, describe(host, readings)

    def _ray_read(self, host: str, runs_dir: str | None, thresholds: Thresholds | None) -> list[GpuReading] | str:

        window_s = (thresholds or Thresholds()).window_s
        got = run_on_hosts(
            read_offered,
            [host],
            host,
            runs_dir=runs_dir,
            thresholds=thresholds,
            timeout_s=READ_TIMEOUT_S + window_s,
            num_cpus=0,
        )[host]
        return f"{host}: unreachable: {got.reason}" if isinstance(got, HostFailure) else got
