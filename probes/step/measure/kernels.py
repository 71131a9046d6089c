"""Kernel time from torch.profiler, counted once.

`key_averages()` lists an ATen op AND the kernels it launched, each with the same device time, so
summing every row double-counts (docs/measurement.md: 266 ms summed against 130 ms of kernels). Here only
device rows are counted: events whose `device_type` is CUDA (kernels, memcpy, memset), each a leaf
with its own duration. The same code runs on a CPU profile with device_type CPU, where the rows
nest (an op and its children) and each is counted by its SELF time: that is how CI checks that
nothing is counted twice. `busy_s` is the union of the rows' intervals: time the device did work.

Profile AFTER timing, never before: once the profiler has started, CUPTI stays attached to the
process and slows every later kernel launch (pytorch/pytorch#144455; seen on an H200 here: a
launch-bound Qwen3-0.6B step timed after a profile ran 30% slower than one timed before).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import time
from collections.abc import Callable, Iterable

import torch
from torch.autograd import DeviceType

# (category, pattern over the lower-cased kernel name), first match wins; the order matters
# (a GEMM's split-K "reduce" is a GEMM, a dtype "copy" kernel is elementwise by its template).
_CATEGORIES: tuple[tuple[str, str], ...] = (
    ("memcpy and memset", r"memcpy|memset"),
    ("attention", r"flash|fmha|attention|sdpa|_mha|mha_"),
    ("optimizer", r"adam|multi_tensor_apply|fused_sgd"),
    ("softmax and CE", r"softmax|nll_loss|cross_entropy|logsumexp"),
    ("fp32 GEMM", r"sgemm|f32f32_f32f32|tf32|nvjet_sss|gemm.*_fp32|cutlass.*simt"),
    ("bf16 GEMM", r"gemm|nvjet|xmma|cutlass|cublas|splitk|matmul|gemv|aten::(add|b)?mm$"),
    ("copy and cast", r"copy|cast|convert|to_dtype|cat_|catarray"),
    ("norm and reduction", r"norm|reduce|rms|sum_|mean"),
    ("elementwise", r"elementwise|vectorized|pointwise|triton_poi|unrolled|index|where|fill"),
)


@functools.lru_cache(maxsize=4096)
def categorize(name: str) -> str:
    """A profile names the same few hundred kernels thousands of times: the answer is cached a name (valid since
    _CATEGORIES never changes; up to 4,096 names a process)."""
    lower = name.lower()
    for category, pattern in _CATEGORIES:
        if re.search(pattern, lower):
            return category
    return "other"


@dataclasses.dataclass(frozen=True, kw_only=True)
class KernelRow:
    category: str
    kernel_s_per_step: float
    share_pct: float
    """Of all counted kernel time."""
    num_calls_per_step: float
    top_kernel: str
    """The category's largest kernel by time (name cut to 80 characters)."""


@dataclasses.dataclass(frozen=True)
class Profile:
    events: list
    num_steps: int
    device_type: DeviceType
    table: str
    """The unedited key_averages() table: raw evidence."""
    wall_s: float
    """Host wall clock over the profiled steps (profiler overhead included)."""
    rows: list = dataclasses.field(init=False, repr=False)
    """device_rows(events, device_type), filtered once here: every figure below is over these."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rows", device_rows(self.events, self.device_type))

    @property
    def kernel_s_per_step(self) -> float:
        """Sum of the device rows' own times per step (>= busy time when kernels overlap)."""
        return sum(map(self_us, self.rows)) / 1e6 / self.num_steps


def profile_steps(step: Callable[[], object], *, device: torch.device, num_steps: int) -> Profile:
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        begin = time.perf_counter()
        for _ in range(num_steps):
            step()
        if cuda:
            torch.cuda.synchronize(device)
        wall_s = time.perf_counter() - begin
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=-1, max_name_column_width=120)
    return Profile(list(prof.events()), num_steps, DeviceType.CUDA if cuda else DeviceType.CPU, table, wall_s)


def device_rows(events: Iterable, device_type: DeviceType) -> list:
    """The rows that run on `device_type`; on CUDA these are kernels/memcpy/memset, never ops, and
    never a GPU user annotation: `record_function` spans such as "Optimizer.step#AdamW.step" are
    mirrored onto the device timeline covering the kernels inside them (seen on an H200: 8.4 ms of
    annotation over 1.8 ms of AdamW kernels per step). On the CPU an annotation's self time is real."""
    return [
        e
        for e in events
        if e.device_type == device_type
        and not getattr(e, "is_async", False)
        and (device_type == DeviceType.CPU or not _is_annotation(e))
    ]


def _is_annotation(event) -> bool:
    return (
        bool(getattr(event, "is_user_annotation", False))
        or "annotation" in str(getattr(event, "activity_type", "")).lower()
    )


def self_us(event) -> float:
    """A device row's own duration; a CPU row's self time (its children excluded)."""
    if event.device_type == DeviceType.CPU:
        return float(event.self_cpu_time_total)
    return float(event.time_range.elapsed_us())


def busy_s(rows: list) -> float:
    """Union of the rows' intervals, in seconds: overlapping kernels count once."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in rows)
    total, cur_start, cur_end = 0.0, None, None
    for start, end in spans:
        if cur_end is None or start > cur_end:
            total += 0.0 if cur_end is None else cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None:
        total += cur_end - cur_start
    return total / 1e6


def kernel_table(profile: Profile) -> list[KernelRow]:
    """Per category: time and calls per step, each device row counted once by its self time."""
    time_us: dict[str, float] = {}
    calls: dict[str, int] = {}
    by_name: dict[tuple[str, str], float] = {}
    for e in profile.rows:
        category = categorize(e.name)
        us = self_us(e)
        time_us[category] = time_us.get(category, 0.0) + us
        calls[category] = calls.get(category, 0) + 1
        by_name[category, e.name] = by_name.get((category, e.name), 0.0) + us
    total = sum(time_us.values()) or 1.0
    out = []
    for category in sorted(time_us, key=time_us.get, reverse=True):
        top = max((k for k in by_name if k[0] == category), key=by_name.get)[1]
        out.append(
            KernelRow(
                category=category,
                kernel_s_per_step=time_us[category] / 1e6 / profile.num_steps,
                share_pct=100.0 * time_us[category] / total,
                num_calls_per_step=calls[category] / profile.num_steps,
                top_kernel=top[:80],
            )
        )
    return out


def busy_per_step_s(profile: Profile) -> float:
    return busy_s(profile.rows) / profile.num_steps


LAUNCH_BOUND_BELOW = 0.9
"""gpu_busy_frac under this: the GPU idles more than 10% of the step (the host CPU sets its time)."""


def busy_frac(step: Callable[[], object], *, device: torch.device, step_s: float) -> float:
    """Kernel-busy time of one profiled step over the step's timed wall time."""
    step()  # a fresh step's first call sets up optimizer state: keep it out of the profile
    return busy_per_step_s(profile_steps(step, device=device, num_steps=1)) / step_s
