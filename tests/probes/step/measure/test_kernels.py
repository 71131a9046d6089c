"""kernels: the kernel table against a real CPU profile (nothing counted twice), an independent check
against known ops and an unprofiled wall clock, the device filter (no op rows, no GPU annotations,
applied once per profile), busy time as a union, and kernel names seen on an H200 by category."""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from probes.step import harness as reference
from probes.step.measure import kernels
from probes.step.train import models


@pytest.fixture(scope="module")
def cpu_profile(tiny) -> kernels.Profile:
    harness = reference.load_harness(reference.REFERENCE)
    model = models.with_lora(
        models.build_model(tiny, weights="random", device=torch.device("cpu")), harness, rank=4, alpha=8
    )
    batch = models.make_batch(vocab_size=128, batch_size=2, seq_len=32, device=torch.device("cpu"))
    step = models.train_step(model, harness, batch, chunk_tokens=16)
    step()
    return kernels.profile_steps(step, device=torch.device("cpu"), num_steps=2)


def test_kernel_table_counts_each_op_once_on_a_real_cpu_profile(cpu_profile):
    events = [e for e in cpu_profile.events if e.device_type == DeviceType.CPU]
    nested = [e for e in events if e.cpu_children]
    assert nested, "a real profile nests ops (aten::linear -> aten::addmm ...)"
    table_us = sum(r.kernel_s_per_step for r in kernels.kernel_table(cpu_profile)) * 1e6 * 2
    self_us = sum(e.self_cpu_time_total for e in events)  # each op without its children
    inclusive_us = sum(e.cpu_time_total for e in events)  # an op and its children: double counts
    assert table_us == pytest.approx(self_us, rel=1e-9)
    assert table_us < 0.8 * inclusive_us
    # parent + child: the table holds the parent's self time only, never the child's time again
    parent = max(nested, key=lambda e: e.cpu_time_total)
    assert parent.self_cpu_time_total <= parent.cpu_time_total - sum(c.cpu_time_total for c in parent.cpu_children) + 1
    assert table_us <= cpu_profile.wall_s * 1e6 * 1.05


def test_the_device_filter_takes_no_op_row(cpu_profile):
    assert kernels.device_rows(cpu_profile.events, DeviceType.CUDA) == []  # ops are never kernels
    assert "aten::" in cpu_profile.table and "Self CPU" in cpu_profile.table  # unedited table kept


def test_busy_time_is_the_union_of_overlapping_rows():
    class Span:
        def __init__(self, start, end):
            self.time_range = type("R", (), {"start": start, "end": end})()

    rows = [Span(0, 10), Span(5, 12), Span(20, 25), Span(21, 22)]
    assert kernels.busy_s(rows) == pytest.approx((12 + 5) / 1e6)


@pytest.mark.parametrize(
    "name, category",
    [
        ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", "fp32 GEMM"),
        ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT", "bf16 GEMM"),
        ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", "attention"),
        ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda", "copy and cast"),
        ("Memcpy DtoD (Device -> Device)", "memcpy and memset"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax and CE"),
        ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor>", "optimizer"),
    ],
)
def test_kernel_names_seen_on_an_h200_fall_in_their_category(name, category):
    assert kernels.categorize(name) == category


def _cuda_row(name: str, annotation: bool, start: float, end: float) -> SimpleNamespace:
    """A device row shaped as torch builds it on CUDA (times in microseconds)."""
    return SimpleNamespace(
        name=name,
        device_type=DeviceType.CUDA,
        is_async=False,
        is_user_annotation=annotation,
        time_range=SimpleNamespace(start=start, end=end, elapsed_us=lambda: end - start),
    )


def _cuda_events() -> list[SimpleNamespace]:
    return [
        _cuda_row("Optimizer.step#AdamW.step", True, 0, 100),
        _cuda_row("multi_tensor_apply_kernel<FusedAdamMathFunctor>", False, 10, 30),
        _cuda_row("nvjet_sm90_tst_320x128", False, 120, 170),
    ]


def test_gpu_user_annotations_are_not_kernel_rows(cpu_profile):
    """On CUDA, record_function spans (Optimizer.step#AdamW.step) appear as device rows covering the
    kernels inside them: counting them double-counts the optimizer. Rows shaped as torch builds them."""
    events = _cuda_events()
    prof = kernels.Profile(events, 1, DeviceType.CUDA, "", 1.0)
    assert [e.name for e in kernels.device_rows(events, DeviceType.CUDA)] == [e.name for e in events[1:]]
    assert prof.kernel_s_per_step == pytest.approx(70e-6)
    table = {r.category: r.kernel_s_per_step for r in kernels.kernel_table(prof)}
    assert table == pytest.approx({"optimizer": 20e-6, "bf16 GEMM": 50e-6})
    # on the CPU, an annotation's self time is its own (children excluded): it stays counted
    cpu_annotations = [e for e in cpu_profile.events if e.device_type == DeviceType.CPU and e.is_user_annotation]
    assert cpu_annotations and all(
        e in kernels.device_rows(cpu_profile.events, DeviceType.CPU) for e in cpu_annotations
    )


def test_kernel_table_against_known_ops_and_a_separately_timed_wall():
    """Independent of the table's formula: a step made of known ops. Its calls per step are known
    by construction (and key_averages() counts the same); its kernel time per step is close to the
    step's wall clock timed without the profiler (an op counted with its child would double it)."""
    # big enough (tens of ms a step) that the profiler's per-op overhead and scheduling noise stay small
    x = torch.randn(768, 768, generator=torch.Generator().manual_seed(0))

    def step():
        for _ in range(3):
            torch.matmul(x, x)  # aten::matmul -> aten::mm: a parent and its child
        x.add(1.0)

    for _ in range(3):
        step()
    walls = []
    for _ in range(7):
        begin = time.perf_counter()
        step()
        walls.append(time.perf_counter() - begin)
    prof = kernels.profile_steps(step, device=torch.device("cpu"), num_steps=4)
    table = {r.category: r for r in kernels.kernel_table(prof)}
    # the unedited key_averages() table: the aten::mm row's last column is "# of Calls"
    mm_rows = [line.split() for line in prof.table.splitlines() if line.split()[:1] == ["aten::mm"]]
    assert len(mm_rows) == 1 and int(mm_rows[0][-1]) == 3 * 4
    # aten::matmul and its child aten::mm both name a GEMM: 3 + 3 rows a step, each by its self time
    assert table["bf16 GEMM"].num_calls_per_step == 3 + 3
    total = sum(r.kernel_s_per_step for r in table.values())
    # Upper bound from the profiled steps' own wall clock (the profiler's overhead slows both alike):
    # ops counted once fit inside it; an op counted with its child would need about twice of it.
    assert total <= 1.1 * prof.wall_s / 4
    assert total >= 0.5 * statistics.median(walls)  # and the table misses none of the step


def test_the_device_rows_are_filtered_once_per_profile(monkeypatch):
    """kernel time, the kernel table and busy time all read the rows the Profile filtered once."""
    calls = []
    real = kernels.device_rows
    monkeypatch.setattr(kernels, "device_rows", lambda *a: calls.append(a[1]) or real(*a))
    prof = kernels.Profile(_cuda_events(), 2, DeviceType.CUDA, "", 1.0)
    assert prof.kernel_s_per_step == pytest.approx(70e-6 / 2)
    assert sum(r.kernel_s_per_step for r in kernels.kernel_table(prof)) == pytest.approx(70e-6 / 2)
    assert kernels.busy_per_step_s(prof) == pytest.approx(70e-6 / 2)  # 10..30 and 120..170, no overlap
    assert calls == [DeviceType.CUDA]
