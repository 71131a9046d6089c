"""Placing a GPU job on a host whose GPU really reads idle, with per-host backoff and a deadline.

The sweep asks `try_place(host)` before it submits a GPU job there; a busy, GPU-less or
unreachable host is backed off (2, 5, 15, 30, 60 s by default, then 60 s each time) and asked again
no sooner than `next_attempt_at(host)`. A job that refuses to start (its own `guard` found the card
busy) reports it through `refused`, which backs the host off the same way. An idle reading resets
the host's backoff. Once `expired()`, the sweep records its waiting jobs `skipped` with
`reason(host)`.

Unreadable is not busy: a host whose GPUs could not be read (its Ray task failed, NVML reports a
GPU lost or nothing to judge by, no NVML at all on a host said to have GPUs) is backed off the
same way, but its skipped jobs say "could not be read" (`skip_reason`), and the sweep exits
non-zero over them; a host that stayed busy is a finding of the morning report, not an error.
"""

from __future__ import annotations

import time
from typing import Callable

from runner.gpu.idle import GpuReading, Thresholds, describe, read_local
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
        backoff_s: tuple[float, ...] = (2, 5, 15, 30, 60),
        clock: Callable[[], float] = time.time,
        read: Callable[[str], list[GpuReading]] | None = None,
    ):
        if not backoff_s or any(b < 0 for b in backoff_s):
            raise ValueError(f"backoff_s: needs at least one delay, none negative (got {backoff_s})")
        self.deadline = deadline
        self.backoff_s = tuple(backoff_s)
        self._clock = clock
        self._read = read
        self._failures: dict[str, int] = {}
        self._next_at: dict[str, float] = {}
        self._reasons: dict[str, str] = {}
        self._unreadable: set[str] = set()
        self._misconfigured: dict[str, str] = {}

    def try_place(
        self, host: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None
    ) -> tuple[bool, str]:
        """(True, "") when some GPU of `host` reads idle now; else (False, why) and the host backs off.

        Asked while the host is still backing off, it answers (False, ...) without reading.
        """
        now = self._clock()
        if now < self._next_at.get(host, now):
            return False, (
                f"{host}: backing off for {self._next_at[host] - now:.0f} s more (last: {self._reasons.get(host, '')})"
            )
        if host in self._misconfigured:  # a job found its GPU assignment names no card: reading idle won't fix it
            self.refused(host, self._misconfigured[host], unreadable=True)
            return False, self._misconfigured[host]
        kind, reason = self._judge(host, runs_dir, thresholds)
        if kind == "idle":
            self._failures.pop(host, None)
            self._next_at.pop(host, None)
            self._reasons.pop(host, None)
            self._unreadable.discard(host)
            return True, ""
        self.refused(host, reason, unreadable=kind == "unreadable")
        return False, reason

    def refused(self, host: str, reason: str, *, unreadable: bool = False) -> None:
        """A job found `host` busy (at placement or when it started: it read it a moment ago), or its
        GPUs could not be read (`unreadable`): ask it again later."""
        if unreadable:
            self._unreadable.add(host)
        else:
            self._unreadable.discard(host)
        num = self._failures.get(host, 0)
        self._failures[host] = num + 1
        delay = self.backoff_s[min(num, len(self.backoff_s) - 1)]
        at = self._clock() + delay
        # Waking past the deadline helps nobody: the sweep wakes then to record the skip.
        self._next_at[host] = at if self.deadline is None else min(at, self.deadline)
        self._reasons[host] = reason

    def next_attempt_at(self, host: str) -> float:
        """When `host` may be asked again; 0.0 for a host that is not backing off.

        Not "now" for such a host: `clock() < next_attempt_at(h)` would then hold whenever the clock
        ticked between the two reads, and the host would never be tried.
        """
        return self._next_at.get(host, 0.0)

    def reason(self, host: str) -> str:
        """Why `host` was last refused ("" when it was not): the reason a skipped job records."""
        return self._reasons.get(host, "")

    def misconfigured(self, host: str, reason: str) -> None:
        """A job on `host` found its GPU assignment names no card NVML sees: the host counts as unreadable
        (a misconfiguration, exit 1 at the end) and is not placed again on an idle reading."""
        self._misconfigured[host] = reason
        self.refused(host, reason, unreadable=True)

    def unreadable(self, host: str) -> bool:
        """True when the last look at `host` could not read its GPUs (not: found them busy)."""
        return host in self._unreadable

    def expired(self) -> bool:
        return self.deadline is not None and self._clock() >= self.deadline

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
            read_local,
            [host],
            host,
            runs_dir=runs_dir,
            thresholds=thresholds,
            timeout_s=READ_TIMEOUT_S + window_s,
            num_cpus=0,
        )[host]
        return f"{host}: unreachable: {got.reason}" if isinstance(got, HostFailure) else got
