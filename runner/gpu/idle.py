"""GPU idleness, observed on the GPU itself: is anything (or anyone) using this card right now?

Ray counts GPUs logically, so a card busy with a training run Ray did not start looks free to it,
and matching process names fails (a wrapper's own command line carries the pattern). So a GPU
reads `busy` from what NVML and the file system show:

- a compute process on the card that is not labprobe's own (this process, its ancestors and
  descendants: inside a Ray worker that is the worker and the raylet above it, never a sibling
  worker, which may be another job on the same card);
- memory used (less what our own processes hold) at or above `Thresholds.mem_used_bytes` at any
  sample: this also catches runs whose pids NVML cannot show (other PID namespaces, containers);
- utilisation at or above `Thresholds.util_pct` in any sample over `window_s`;
- when the host names a runs directory, a file under it modified within `runs_fresh_min`.

A field NVML will not give on a card (a GB10 reports no memory, a MIG instance no utilisation, a
container may hide the process list) is left out of the verdict and named in the reason; the rest
decides. Only when neither the process list nor memory used can be read is there nothing to tell a
busy card from an idle one: that card, and a GPU NVML reports lost, read `unreachable`.

A host without nvidia-ml-py, the NVML library or a GPU reads as one `no-gpu` row, never an
error. The samples come from runner.gpu.nvml (NVML, or fake files in tests), the runs directory's
newest file from runner.gpu.freshness; `labprobe idle` is runner.cli.idle.

Never imports Ray at module import time: the GPU box runs this standalone.
"""

from __future__ import annotations

import dataclasses
import os
import pwd
import sys
import time
from pathlib import Path
from typing import Any

from runner.gpu.freshness import FileAge, newest_file
from runner.gpu.nvml import FAKE_ENV, GpuSample, read_samples
from runner.hosts.nodes import node_host

GIB = 1024**3


class GpuBusyError(RuntimeError):
    """A GPU job refusing to start on a busy card; str(e) is the reason."""


class GpuMisconfiguredError(GpuBusyError):
    """The job's CUDA_VISIBLE_DEVICES names no card NVML sees (MIG UUIDs, a typo): no wait will clear it."""


@dataclasses.dataclass(frozen=True)
class Thresholds:
    util_pct: float = 10.0
    """Busy at or above this utilisation in any sample. Idle cards read 0; a training step 50-100."""
    mem_used_bytes: int = 1 * GIB
    """Busy at or above this much memory used by others. An idle H200 reads well under 0.1 GiB (NVML
    v2, reserved memory excluded); a bare CUDA context is ~0.5 GiB, any training run holds several GiB."""
    window_s: float = 3.0
    """Utilisation is sampled over this window: a training loop between steps (data loading,
    checkpointing) can read 0% for a moment, rarely for seconds."""
    sample_hz: float = 5.0
    """Samples per second. NVML's own utilisation period is 1/6-1 s, so 5 Hz misses no period."""
    runs_fresh_min: float = 10.0
    """A file under the runs directory changed within this many minutes means a run is live:
    training runs write logs or metrics at least every few minutes."""

    @classmethod
    def from_cluster(cls, idle: Any | None) -> Thresholds:
        """From a cluster.yaml host's `idle:` overrides (runner.lab.cluster.IdleThresholds); None: defaults."""
        if idle is None:
            return cls()
        mapping = {
            "max_util_pct": ("util_pct", float),
            "window_s": ("window_s", float),
            "runs_quiet_min": ("runs_fresh_min", float),
            "max_mem_used_mib": ("mem_used_bytes", lambda mib: int(mib * 1024**2)),
        }
        values = {
            mine: conv(getattr(idle, theirs))
            for theirs, (mine, conv) in mapping.items()
            if getattr(idle, theirs, None) is not None
        }
        return cls(**values)


@dataclasses.dataclass(frozen=True)
class GpuReading:
    host: str
    index: int
    name: str
    verdict: str
    """idle | busy | unreachable (lost, or nothing readable to judge by) | no-gpu"""
    reason: str
    uuid: str = ""
    mem_used_bytes: int | None = None
    """The most memory used seen in the window (all processes)."""
    mem_total_bytes: int | None = None
    util_max_pct: float | None = None
    num_samples: int = 0
    pids: tuple[int, ...] = ()
    """Foreign compute processes on the card."""
    users: tuple[str, ...] = ()
    """The user running each of `pids` ("?" where /proc cannot tell: another PID namespace)."""
    unknown: tuple[str, ...] = ()
    """What NVML would not give on this card (runner.gpu.nvml GpuSample.unknown)."""
    unified: bool = False
    """The GPU shares the host's memory (GB10); host_mem_* are then the host's, from /proc/meminfo."""
    host_mem_total_bytes: int | None = None
    host_mem_available_bytes: int | None = None
    own_pids: tuple[int, ...] = ()
    """labprobe's own compute processes on the card (not counted)."""
    newest_file: str = ""
    newest_file_age_s: float | None = None
    node_host: str = ""
    """The host label of the Ray node that took the reading; empty outside Ray."""
    reader_pid: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# -- the verdict (pure) ---------------------------------------------------------------------------


def verdict(
    sample: GpuSample,
    *,
    own_pids: frozenset[int] | set[int] = frozenset(),
    newest: FileAge | None = None,
    runs_dir: str | None = None,
    thresholds: Thresholds | None = None,
    users: dict[int, str] | None = None,
) -> tuple[str, str]:
    """("idle" | "busy" | "unreachable", reason) from one GPU's samples, our pids and the runs
    directory's newest file; `users` names each pid's user (pid -> name).

    A busy reason lists every cause found; an idle reason says what was seen, so either can be
    checked by a person reading `labprobe idle`. Fields NVML would not give are named in both.
    """
    if sample.lost:
        return "unreachable", sample.lost
    t = thresholds or Thresholds()
    causes = _process_causes(sample, own_pids, users or {})
    own_mem = sum(mem or 0 for pid, mem in sample.processes if pid in own_pids)
    mem_others = max(0, max(sample.mem_used_bytes, default=0) - own_mem)
    if sample.mem_used_bytes and mem_others >= t.mem_used_bytes:
        ours = f", ours {_gib(own_mem)} excluded" if own_mem else ""
        causes.append(f"memory used {_gib(mem_others)} >= {_gib(t.mem_used_bytes)}{ours}")
    hot = [u for u in sample.util_pct if u >= t.util_pct]
    if hot:
        causes.append(
            f"utilisation >= {t.util_pct:g}% in {len(hot)} of {len(sample.util_pct)} "
            f"samples over {t.window_s:g} s (max {max(hot):g}%)"
        )
    if newest is not None and newest.age_s < -60:  # a clock ahead (NFS, an untarred run): said, still not idle
        causes.append(
            f"{newest.path} is dated {_ago(-newest.age_s)} in the future (a clock ahead of this host's?): "
            "taken as a run writing until then"
        )
    elif newest is not None and newest.age_s < t.runs_fresh_min * 60:
        causes.append(f"{newest.path} changed {_ago(newest.age_s)} ago (< {t.runs_fresh_min:g} min: a run is writing)")
    notes = _notes(sample)
    if causes:
        return "busy", "; ".join(causes + notes)
    if not sample.processes_known and not sample.mem_used_bytes:
        return "unreachable", "; ".join(["cannot tell idle from busy: no process list and no memory figure", *notes])
    seen = ["no foreign process"] if sample.processes_known else []  # an unknown field: named in the notes
    seen += [f"{_gib(mem_others)} used"] if sample.mem_used_bytes else []
    seen += [f"util max {max(sample.util_pct):g}% over {len(sample.util_pct)} samples"] if sample.util_pct else []
    if newest is not None:
        seen.append(f"newest file under {runs_dir or 'the runs dir'} {_ago(newest.age_s)} old")
    elif runs_dir:
        seen.append(f"no file under {runs_dir}")
    return "idle", ", ".join(seen) + "".join(f"; {n}" for n in notes)


def _process_causes(sample: GpuSample, own: frozenset[int] | set[int], users: dict[int, str]) -> list[str]:
    """`pid 4242 (user alice, 20.00 GiB) computes on it` for each foreign process."""
    return [
        f"pid {pid} (user {users.get(pid, '?')}, {_gib(mem) if mem is not None else 'memory unknown'}) computes on it"
        for pid, mem in sample.processes
        if pid not in own
    ]


def _notes(sample: GpuSample) -> list[str]:
    """What NVML would not give; for unified memory, the host's memory instead."""
    notes = list(sample.unknown)
    if sample.unified and sample.host_mem_total_bytes is not None:
        available = sample.host_mem_available_bytes
        extra = f", {_gib(available)} available" if available is not None else ""
        notes.append(f"host memory {_gib(sample.host_mem_total_bytes)}{extra} (/proc/meminfo)")
    return notes


def process_user(pid: int) -> str:
    """The user running `pid` (from /proc); "?" where it is gone or in another PID namespace."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        uid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("Uid:")))
    except (OSError, StopIteration, ValueError, IndexError):
        return "?"
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no name here (a container's user)
        return str(uid)


def _gib(num_bytes: int | float | None) -> str:
    return "? GiB" if num_bytes is None else f"{num_bytes / GIB:.2f} GiB"


def _ago(seconds: float) -> str:
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


# -- what counts as ours, and the readings ---------------------------------------------------------


def _ppid(pid: int) -> int:
    """Parent pid from /proc/<pid>/stat (the command name may hold spaces and parentheses)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def own_pids(pid: int | None = None) -> frozenset[int]:
    """This process, its ancestors (short of init) and its descendants.

    In a Ray worker the ancestors are the raylet (and, for an embedded Ray, the driver that started
    it); sibling workers are not ours: one may be another GPU job on the same card. A process
    started apart from this one (another person's run, a separate session) is never ours.
    """
    pid = os.getpid() if pid is None else pid
    ours = {pid}
    parent = _ppid(pid) if Path("/proc").is_dir() else os.getppid()
    while parent > 1 and parent not in ours:
        ours.add(parent)
        parent = _ppid(parent)
    children: dict[int, list[int]] = {}
    try:
        entries = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit()]
    except OSError:
        entries = []
    for child in entries:
        children.setdefault(_ppid(child), []).append(child)
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in ours:
                ours.add(child)
                todo.append(child)
    return frozenset(ours)


def read_local(host: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None) -> list[GpuReading]:
    """Read every GPU of this machine (run it on `host`: a pinned Ray task, or inline there)."""
    t = thresholds or Thresholds()
    samples = read_samples(host, window_s=t.window_s, sample_hz=t.sample_hz)
    node, reader = node_host(), os.getpid()
    if isinstance(samples, str):
        return [
            GpuReading(
                host=host, index=-1, name="", verdict="no-gpu", reason=samples, node_host=node, reader_pid=reader
            )
        ]
    ours = own_pids()
    newest = newest_file(runs_dir, fresh_s=t.runs_fresh_min * 60) if runs_dir else None
    unchecked = f"; runs dir {runs_dir} missing: not checked" if runs_dir and not os.path.isdir(runs_dir) else ""
    readings = []
    for s in samples:
        foreign = tuple(p for p, _ in s.processes if p not in ours)
        users = {pid: process_user(pid) for pid in foreign}
        word, reason = verdict(s, own_pids=ours, newest=newest, runs_dir=runs_dir, thresholds=t, users=users)
        readings.append(
            GpuReading(
                host=host,
                index=s.index,
                name=s.name,
                verdict=word,
                reason=reason + unchecked,
                uuid=s.uuid,
                mem_used_bytes=max(s.mem_used_bytes, default=None),
                mem_total_bytes=s.mem_total_bytes,
                util_max_pct=max(s.util_pct, default=None),
                num_samples=len(s.util_pct),
                pids=foreign,
                users=tuple(users[p] for p in foreign),
                own_pids=tuple(p for p, _ in s.processes if p in ours),
                unknown=s.unknown,
                unified=s.unified,
                host_mem_total_bytes=s.host_mem_total_bytes,
                host_mem_available_bytes=s.host_mem_available_bytes,
                newest_file=newest.path if newest else "",
                newest_file_age_s=newest.age_s if newest else None,
                node_host=node,
                reader_pid=reader,
            )
        )
    return readings


def read_offered(host: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None) -> list[GpuReading]:
    """read_local, less the cards this node keeps out of Ray: a node started `CUDA_VISIBLE_DEVICES=0 ray start
    --num-gpus=1` offers card 0 only, and a task without GPUs inherits that variable from its raylet. What the
    sweep's placement reads: an idle card Ray cannot hand out is no reason to place a job."""
    readings = read_local(host, runs_dir=runs_dir, thresholds=thresholds)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not any(r.index >= 0 for r in readings):
        return readings
    wanted = {w.strip() for w in visible.split(",") if w.strip()}
    offered = [r for r in readings if str(r.index) in wanted or r.uuid in wanted]
    return offered or readings  # names no card NVML sees: the job's own guard says so (misconfigured)


# -- the job-side check ------------------------------------------------------------------------------


class GpuUnreadableError(GpuBusyError):
    """The job's card could not be judged (NVML gives no reading, the GPU is lost): not busy, unreadable."""


WAIT_POLL_S = 2.0
"""How often a job waiting for a foreign process to leave its card reads the card again (plus the window)."""


@dataclasses.dataclass(frozen=True)
class Card:
    """The card a GPU job runs on, as guard() settled it: always the one Ray assigned its worker."""

    index: int
    uuid: str
    name: str
    assigned: str | None
    """CUDA_VISIBLE_DEVICES as found (Ray's assignment), None when unset (an inline run, no Ray)."""
    waited_s: float = 0.0
    """How long the job waited on its card for a foreign process to leave (0: idle at once)."""
    wait_reason: str = ""
    """What it waited for (the first busy reading); empty when it did not wait."""
    seen: tuple[GpuReading, ...] = dataclasses.field(default=(), compare=False, repr=False)
    """Every card of the host in the reading that settled it."""


def assigned_cards(host: str, readings: list[GpuReading], visible_env: str | None) -> list[GpuReading]:
    """The cards this job may run on: the one CUDA_VISIBLE_DEVICES names first (Ray's assignment, an NVML
    index or a UUID), or with it unset (no Ray: an inline run) every card of the host.

    GpuMisconfiguredError when the assignment names no card NVML sees (MIG UUIDs, a typo);
    GpuUnreadableError when NVML shows no GPU at all on a host said to have one.
    """
    gpus = [r for r in readings if r.verdict != "no-gpu"]
    if not gpus:
        raise GpuUnreadableError(describe(host, readings))
    if visible_env is None:
        return gpus
    wanted = [w.strip() for w in visible_env.split(",") if w.strip()]
    mine = [r for w in wanted[:1] for r in gpus if w in (str(r.index), r.uuid)]
    if not mine:
        raise GpuMisconfiguredError(f"{host}: CUDA_VISIBLE_DEVICES={visible_env!r} names no GPU that NVML sees")
    return mine


def guard(
    host: str,
    *,
    runs_dir: str | None = None,
    thresholds: Thresholds | None = None,
    wait_s: float = 0.0,
    deadline: float | None = None,
) -> Card:
    """A GPU job's first call (before anything initialises CUDA): wait until the card Ray assigned this
    worker reads idle, at most `wait_s` (and never past `deadline`, a time.time()), then return it.

    The job never moves to another card: Ray's GPU accounting gave this worker this card, and any
    other card may be another job's. While it waits it holds Ray's slot for the busy card, so Ray
    hands the host's other cards to the next jobs. GpuBusyError (naming the foreign process, the
    fresh run file ...) when the card stays busy; GpuUnreadableError when it cannot be judged;
    GpuMisconfiguredError when the assignment names no card.

    CUDA_DEVICE_ORDER becomes PCI_BUS_ID (NVML's order) so an index Ray set means the card NVML
    judged; CUDA_VISIBLE_DEVICES is left as Ray set it. Unset (an inline run), it becomes the UUID of
    the first idle card, unless CUDA already started in this process (then only card 0 is judged)
    or the readings are fake (tests: a variable set here would leak into the test process).
    """
    t0 = time.monotonic()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    first_busy = ""
    while True:
        readings = read_local(host, runs_dir=runs_dir, thresholds=thresholds)
        cards = assigned_cards(host, readings, visible)
        if visible is None and _cuda_started():  # `sweep --inline` after a first GPU job: CUDA is on card 0
            cards = cards[:1]
        idle = [r for r in cards if r.verdict == "idle"]
        waited = time.monotonic() - t0
        if idle:
            return _settle(idle[0], visible, waited, first_busy, readings)
        if not any(r.verdict == "busy" for r in cards):  # unreachable: no wait will tell
            raise GpuUnreadableError(describe(host, cards))
        first_busy = first_busy or describe(host, cards)
        left = min(wait_s - waited, (deadline - time.time()) if deadline is not None else wait_s - waited)
        if left <= 0:
            raise GpuBusyError(f"{describe(host, cards)} (waited {waited:.0f} s on the card Ray gave this job)")
        time.sleep(min(WAIT_POLL_S, left))


def _settle(card: GpuReading, visible: str | None, waited_s: float, why: str, seen: list[GpuReading]) -> Card:
    """The chosen card as a Card; the environment pointed at it before CUDA starts."""
    if not _cuda_started():
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"  # CUDA's index i is then NVML's card i
        if visible is None and not os.environ.get(FAKE_ENV):
            os.environ["CUDA_VISIBLE_DEVICES"] = card.uuid or str(card.index)
    return Card(
        index=card.index,
        uuid=card.uuid,
        name=card.name,
        assigned=visible,
        waited_s=round(waited_s, 1) if why else 0.0,
        wait_reason=why,
        seen=tuple(r for r in seen if r.index >= 0),
    )


def _cuda_started() -> bool:
    """Whether this process already initialised CUDA (then CUDA_VISIBLE_DEVICES no longer moves it)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def describe(host: str, readings: list[GpuReading]) -> str:
    """One line for a host's non-idle GPUs: why no job should start there."""
    return f"{host}: " + "; ".join(
        f"GPU {r.index} {r.verdict}: {r.reason}" if r.index >= 0 else f"{r.verdict}: {r.reason}" for r in readings
    )


# -- a GPU probe run by hand ---------------------------------------------------------------------------


def _torch_sees_a_gpu(device: str) -> bool:
    """Whether `device` runs on a CUDA card here (torch's view: NVML's may be missing)."""
    import torch

    return torch.cuda.is_available() and device.startswith(("cuda", "auto"))


def check_direct(
    host: str, device: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None
) -> str | None:
    """None when a GPU probe run by hand (`labprobe probe carrier`) may start on `device`; else why not,
    in one line naming the busy process (pid, user, memory) or the fresh run file.

    The same readings and verdict as the sweep's placement and its jobs' guard, but no card switching:
    a person who asked for `cuda:1` gets told, not moved. `device` is the probe's own (auto, cpu,
    cuda[:N]); cpu is never checked, and auto on a host where NVML sees no GPU runs on the CPU.
    """
    if device == "cpu":
        return None
    readings = read_local(host, runs_dir=runs_dir, thresholds=thresholds)
    gpus = [r for r in readings if r.verdict != "no-gpu"]
    if not gpus:
        if _torch_sees_a_gpu(device):  # NVML unreadable, yet the probe would run on a GPU: not known idle
            why = readings[0].reason if readings else "no reading"
            return f"{host}: NVML gives no reading ({why}), so the GPU is not known to be idle (--no-idle-check runs anyway)"
        return None  # no GPU here: auto runs on the CPU
    index = int(device.split(":")[1]) if ":" in device else 0
    visible = [w.strip() for w in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if w.strip()]
    wanted = visible[index] if index < len(visible) else str(index)
    target = [r for r in gpus if wanted in (str(r.index), r.uuid)] or gpus  # unknown name: judge them all
    bad = [r for r in target if r.verdict != "idle"]
    return describe(host, bad) if bad else None
