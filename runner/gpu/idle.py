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


# -- the job-side check ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Card:
    """The card a GPU job runs on, as guard() settled it."""

    index: int
    uuid: str
    assigned: str | None
    """CUDA_VISIBLE_DEVICES as found (Ray's assignment), None when unset."""
    switched: bool
    """True when the assigned card read busy and the job was pointed at this idle one instead."""


def pick_card(host: str, readings: list[GpuReading], visible_env: str | None) -> Card:
    """The job-side decision: an idle card of this host for the job, or GpuBusyError.

    `visible_env` is CUDA_VISIBLE_DEVICES (NVML indices or UUIDs; Ray sets it for num_gpus tasks).
    The first card it names is kept when it reads idle; when it reads busy (Ray counts GPUs
    logically and may hand out the card someone is training on), or the variable is unset, the
    first idle card of the host is chosen. Only when no card of the host reads idle does it refuse.
    """
    gpus = [r for r in readings if r.verdict != "no-gpu"]
    if not gpus:
        raise GpuBusyError(describe(host, readings))
    wanted = [w.strip() for w in (visible_env or "").split(",") if w.strip()]
    assigned = [r for w in wanted[:1] for r in gpus if w in (str(r.index), r.uuid)]
    if visible_env is not None and not assigned:
        raise GpuMisconfiguredError(f"{host}: CUDA_VISIBLE_DEVICES={visible_env!r} names no GPU that NVML sees")
    if assigned and assigned[0].verdict == "idle":
        return Card(index=assigned[0].index, uuid=assigned[0].uuid, assigned=visible_env, switched=False)
    idle = [r for r in gpus if r.verdict == "idle"]
    if not idle:
        raise GpuBusyError(describe(host, gpus))
    return Card(index=idle[0].index, uuid=idle[0].uuid, assigned=visible_env, switched=bool(assigned))


def guard(host: str, *, runs_dir: str | None = None, thresholds: Thresholds | None = None) -> Card:
    """A GPU job's first call (before anything initialises CUDA): read every card of the host and
    point the job at an idle one (pick_card); refuse only when none reads idle.

    Switching away from Ray's assignment is safe because the runner runs at most one GPU job per
    host at a time: the idle card is no other job's. CUDA_VISIBLE_DEVICES becomes the chosen card's
    UUID (indices can differ between NVML and CUDA orderings). With fake readings (tests) the
    variable is only switched when it was set (by Ray inside a GPU task, or by a test that restores
    it): an unset one set here would leak into the test process and the Ray nodes it starts later.
    """
    readings = read_local(host, runs_dir=runs_dir, thresholds=thresholds)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    card = pick_card(host, readings, visible)
    if card.switched and _cuda_started():  # `sweep --inline`: CUDA read the variable once, at its start
        raise GpuBusyError(
            f"{host}: CUDA_VISIBLE_DEVICES={visible!r} reads busy and this process already runs CUDA there: "
            f"moving to GPU {card.index} needs a new process (a sweep without --inline starts one a job)"
        )
    # An index Ray set was matched against NVML's (PCI) order; CUDA reads it fastest-first, which on a host
    # of mixed cards is another card: pinned to the UUID, the job runs on the card that was judged.
    by_index = visible is not None and card.uuid and visible.split(",")[0].strip() != card.uuid
    if card.switched or by_index or (visible is None and not os.environ.get(FAKE_ENV)):
        os.environ["CUDA_VISIBLE_DEVICES"] = card.uuid or str(card.index)
    return card


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
