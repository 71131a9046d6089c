"""Where a step's GPU time goes, from the torch profiler's CPU and GPU timelines (issue 27's bump).

A step timed by CUDA events is the GPU's span from the step's first launch to its last kernel's end. That
span is kernel time plus idle gaps; a gap is the host's when the kernel after it was launched only after
the GPU had run out of work (the host was late), else the device's (a queued kernel started late). A slow
step whose kernels took longer is the GPU's doing (clocks, memory); one whose extra time is host-starved
gaps is the host's, and the CPU ops running during those gaps say what the host was doing.

`spans(prof)` turns a finished `torch.profiler.profile` into plain `Span`s; `per_step(...)` measures each
step marked by a `record_function(f"{STEP_MARK}{i}")`; `compare(steps, bumps)` sets the bump steps
beside the others. Kept apart from spread_diag.py so the arithmetic is tested on hand-made timelines.
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import re
import statistics

import numpy as np

STEP_MARK = "spread_diag_step_"
GPU_KINDS = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_KINDS = ("cuda_runtime", "cuda_driver")
CPU_KINDS = ("cpu_op", "user_annotation", "python_function")
GAP_MIN_US = 20.0
"""Idle gaps shorter than this are a launch's own latency, not a wait worth naming."""
TOP = 6


@dataclasses.dataclass(frozen=True)
class Span:
    start_us: float
    end_us: float
    name: str
    corr: int = -1
    """CUPTI's correlation id: a GPU op's launch carries the same."""
    linked: int = 0
    """The CPU op a GPU op or a launch belongs to (kineto's linked correlation id; 0 for the CPU op itself)."""


@dataclasses.dataclass
class Timeline:
    gpu: list[Span]
    launches: list[Span]
    cpu: list[Span]
    steps: list[Span]


def spans(prof) -> Timeline:
    """The profile's events as Spans, by kind (kineto's raw events: building FunctionEvents for a few
    hundred thousand events would take minutes)."""
    out = Timeline([], [], [], [])
    for e in prof.profiler.kineto_results.events():
        kind, name = _kind(e), e.name()
        span = Span(e.start_ns() / 1e3, e.end_ns() / 1e3, name, int(e.correlation_id()), int(e.linked_correlation_id()))
        if kind in GPU_KINDS:
            out.gpu.append(span)
        elif kind in LAUNCH_KINDS:
            out.launches.append(span)
        elif kind == "user_annotation" and name.startswith(STEP_MARK):
            out.steps.append(span)
        elif kind in CPU_KINDS:
            out.cpu.append(span)
    out.steps.sort(key=lambda s: int(s.name.removeprefix(STEP_MARK)))
    return out


RUNTIME_CALL = re.compile(r"cu(da)?[A-Z]")
"""The CUDA runtime's and driver's API names (cudaLaunchKernel, cuLaunchKernelEx, cudaStreamSynchronize)."""


def _kind(e) -> str:
    """kineto's activity type; from the device and the name where this torch's events lack `activity_type`
    (torch 2.11's do). kineto also records each `record_function` range's span on the GPU, as a CUDA
    event: a user annotation, never a kernel (counted as one, a step's own mark would cover its gaps)."""
    if hasattr(e, "activity_type"):
        return e.activity_type()
    cuda, name = str(e.device_type()).endswith("CUDA"), e.name()
    if getattr(e, "is_user_annotation", lambda: False)():
        return "gpu_user_annotation" if cuda else "user_annotation"
    if cuda:
        return "gpu_memcpy" if "Memcpy" in name else "gpu_memset" if "Memset" in name else "kernel"
    if RUNTIME_CALL.match(name):  # with or without a CPU op linked: a launch all the same
        return "cuda_runtime"
    return "user_annotation" if name.startswith(STEP_MARK) else "cpu_op"


def per_step(timeline: Timeline, gap_min_us: float = GAP_MIN_US) -> tuple[list[dict], float]:
    """One record per marked step, and the share of GPU ops whose launch was found. A GPU op belongs to the
    step during whose CPU range it was launched (the next step's start closes the range); an op whose
    launch was not found goes by its own start. An op whose clock is off (ending before it starts, starting
    before its launch: kineto has given such records at a session's head) is left out and counted in the
    first record's `gpu_ops_dropped`."""
    launched_at = _launch_times(timeline)
    starts = [s.start_us for s in timeline.steps]
    by_step: list[list[tuple[Span, float | None]]] = [[] for _ in timeline.steps]
    found = 0
    dropped = 0
    for op, launched in zip(timeline.gpu, launched_at):
        if op.end_us < op.start_us or (launched is not None and op.start_us < launched):
            dropped += 1  # a record whose clock is off (a kernel cannot start before it was launched)
            continue
        found += launched is not None
        i = bisect.bisect_right(starts, op.start_us if launched is None else launched) - 1
        if i >= 0:
            by_step[i].append((op, launched))
    # the host's side of a gap: CPU ops and the runtime's own calls (a synchronize, a copy back)
    cpu = _CpuOps([s for s in [*timeline.cpu, *timeline.launches] if not s.name.startswith(STEP_MARK)])
    records = [_one_step(ops, cpu, start, gap_min_us) for ops, start in zip(by_step, starts)]
    waits = [s for s in timeline.launches if "ynchronize" in s.name]  # once: launches run to hundreds of thousands
    for record, step in zip(records, timeline.steps):
        record["sync_calls"] = _sync_calls(waits, step)
    if records:
        records[0]["gpu_ops_dropped"] = dropped
    kept = len(timeline.gpu) - dropped
    return records, found / kept if kept else 0.0


def _sync_calls(waits: list[Span], step: Span) -> dict[str, int]:
    """The runtime's synchronising calls (`waits`) made inside the step's own mark (the timing's wait after it
    is not), by name: the step's waits counted a second way, beside probes.step.measure.syncs' census."""
    calls: dict[str, int] = collections.defaultdict(int)
    for s in waits:
        if step.start_us <= s.start_us <= step.end_us:
            calls[s.name] += 1
    return dict(calls)


def _launch_times(timeline: Timeline) -> list[float | None]:
    """Each GPU op's launch time: the runtime call with its CUPTI correlation id; where fewer than half match
    so (another torch's numbering), the k-th op and the k-th launch linked to the same CPU op, in time order."""
    by_corr = {s.corr: s.start_us for s in timeline.launches if s.corr > 0}
    times = [by_corr.get(op.corr) for op in timeline.gpu]
    if sum(t is not None for t in times) >= len(times) / 2:
        return times
    queues: dict[int, list[float]] = collections.defaultdict(list)
    for launch in sorted(timeline.launches, key=lambda s: s.start_us):
        if launch.linked > 0:
            queues[launch.linked].append(launch.start_us)
    taken: dict[int, int] = collections.defaultdict(int)
    out: list[float | None] = [None] * len(timeline.gpu)
    # in the order the ops started: one stream runs a CPU op's launches in the order it made them
    for i in sorted(range(len(timeline.gpu)), key=lambda i: timeline.gpu[i].start_us):
        linked = timeline.gpu[i].linked
        queue, k = queues.get(linked, []), taken[linked]
        out[i] = queue[k] if k < len(queue) else None
        taken[linked] += 1
    return out


class _CpuOps:
    """CPU ops sorted by start, as arrays: a gap's overlapping ops in one vectorised pass."""

    def __init__(self, ops: list[Span]):
        ops = sorted(ops, key=lambda s: s.start_us)
        self.names = [s.name[:80] for s in ops]
        self.starts = np.array([s.start_us for s in ops], dtype=float)
        self.ends = np.array([s.end_us for s in ops], dtype=float)

    def attribute(self, since: float, a: float, b: float, into: dict[str, float]) -> None:
        """Add to `into` each op's overlap with [a, b] in ms, every nesting level and every thread (kineto's
        launch events carry the OS thread, its CPU ops torch's own numbering: the two do not match). Only
        ops that began after `since` (the step's start) are looked at: the step's own, not the whole run."""
        lo, hi = np.searchsorted(self.starts, since), np.searchsorted(self.starts, b)
        overlap = np.minimum(self.ends[lo:hi], b) - np.maximum(self.starts[lo:hi], a)
        for k in np.nonzero(overlap > 0)[0]:
            into[self.names[lo + k]] += float(overlap[k]) / 1e3


def _one_step(ops: list[tuple[Span, float | None]], cpu: _CpuOps, since: float, gap_min_us: float) -> dict:
    """Busy (the union of GPU ops), span and idle; of the idle, the gaps where the host was late (and what the
    CPU ran then) and those before an op whose launch was not found (unattributed); each GPU op name's time."""
    ops = sorted(ops, key=lambda o: o[0].start_us)
    kernels: dict[str, float] = collections.defaultdict(float)
    host_ops: dict[str, float] = collections.defaultdict(float)
    busy = starved = unknown = 0.0
    gaps = []
    frontier = ops[0][0].start_us if ops else 0.0
    for op, launched in ops:
        kernels[op.name[:100]] += (op.end_us - op.start_us) / 1e3
        gap = op.start_us - frontier
        if gap > gap_min_us:
            late = 0.0 if launched is None else max(0.0, min(launched, op.start_us) - frontier)
            starved += late
            unknown += gap if launched is None else 0.0
            if late > gap_min_us:
                cpu.attribute(since, frontier, frontier + late, host_ops)
            gaps.append({"at_us": frontier, "idle_ms": gap / 1e3, "host_late_ms": late / 1e3, "next": op.name[:60]})
        busy += max(0.0, op.end_us - max(op.start_us, frontier))
        frontier = max(frontier, op.end_us)
    span = (frontier - ops[0][0].start_us) if ops else 0.0
    return {"gpu_ops": len(ops), "span_ms": span / 1e3, "busy_ms": busy / 1e3, "idle_ms": (span - busy) / 1e3,
            "host_starved_ms": starved / 1e3, "unattributed_idle_ms": unknown / 1e3, "host_ops_ms": dict(host_ops),
            "kernels_ms": dict(kernels), "largest_gaps": sorted(gaps, key=lambda g: -g["idle_ms"])[:3]}  # fmt: skip


def compare(records: list[dict], bumps: list[int]) -> dict:
    """The bump steps beside the others: mean busy, idle and host-starved ms, the kernels that grew most and
    the CPU ops that ran most during host-starved gaps (ms a step)."""
    calm = [i for i in range(len(records)) if i not in bumps]
    out = {}
    for key in ("span_ms", "busy_ms", "idle_ms", "host_starved_ms", "unattributed_idle_ms"):
        out[key] = {"bumps": _mean(records, bumps, key), "calm": _mean(records, calm, key)}
    waits = [{"sync_calls_total": sum(r.get("sync_calls", {}).values())} for r in records]
    out["sync_calls_per_step"] = {
        "bumps": _mean(waits, bumps, "sync_calls_total"),
        "calm": _mean(waits, calm, "sync_calls_total"),
    }
    out["kernels_grew_ms"] = _top_growth(records, bumps, calm, "kernels_ms")
    out["host_ops_at_bumps_ms"] = _top_mean(records, bumps, "host_ops_ms")
    out["host_ops_calm_ms"] = _top_mean(records, calm, "host_ops_ms")
    out["largest_gaps_at_bumps"] = {i: records[i]["largest_gaps"] for i in bumps}
    return out


def _mean(records: list[dict], idx: list[int], key: str) -> float | None:
    return statistics.fmean(records[i][key] for i in idx) if idx else None


def _per_name(records: list[dict], idx: list[int], key: str) -> dict[str, float]:
    """Mean ms a step of each name over the steps `idx` (a name absent from a step counts 0 there)."""
    total: dict[str, float] = collections.defaultdict(float)
    for i in idx:
        for name, ms in records[i][key].items():
            total[name] += ms
    return {name: ms / len(idx) for name, ms in total.items()} if idx else {}


def _top_mean(records: list[dict], idx: list[int], key: str) -> list[tuple[str, float]]:
    means = _per_name(records, idx, key)
    return sorted(((n, round(ms, 3)) for n, ms in means.items()), key=lambda t: -t[1])[:TOP]


def _top_growth(records: list[dict], bumps: list[int], calm: list[int], key: str) -> list[tuple[str, float]]:
    at_bumps, elsewhere = _per_name(records, bumps, key), _per_name(records, calm, key)
    growth = {n: at_bumps.get(n, 0.0) - elsewhere.get(n, 0.0) for n in {*at_bumps, *elsewhere}}
    return sorted(((n, round(ms, 3)) for n, ms in growth.items()), key=lambda t: -t[1])[:TOP]
