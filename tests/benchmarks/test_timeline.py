"""The timeline arithmetic of spread_diag's profiled segment, on hand-made timelines and a real CPU profile."""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import timeline  # noqa: E402
from timeline import STEP_MARK, Span, Timeline  # noqa: E402


def _two_steps() -> Timeline:
    """Step 0: kernels 0-100 and 150-250 us, the second launched at 140 (the GPU idled 50 us, 40 of them
    waiting for the host, which ran `aten::nonzero` then). Step 1: kernels 1000-1100 and 1110-1300, the
    second launched at 1010, early: its 10 us gap is below the threshold."""
    steps = [Span(-10, 900, f"{STEP_MARK}0"), Span(990, 1400, f"{STEP_MARK}1")]
    gpu = [Span(0, 100, "gemm", 1), Span(150, 250, "softmax", 2), Span(1000, 1100, "gemm", 3)]
    gpu.append(Span(1110, 1300, "gemm", 4))
    launches = [Span(-5, -4, "cudaLaunchKernel", 1), Span(140, 141, "cuLaunchKernel", 2)]
    launches += [Span(995, 996, "cudaLaunchKernel", 3), Span(1010, 1011, "cudaLaunchKernel", 4)]
    cpu = [Span(90, 140, "aten::nonzero"), Span(95, 120, "cudaStreamSynchronize"), Span(300, 400, "aten::mm")]
    return Timeline(gpu, launches, cpu, steps)


def test_gpu_ops_go_to_the_step_that_launched_them_and_host_late_gaps_are_named():
    records, found = timeline.per_step(_two_steps())
    assert found == 1.0 and [r["gpu_ops"] for r in records] == [2, 2]
    first, second = records
    assert first["span_ms"] == pytest.approx(0.25) and first["busy_ms"] == pytest.approx(0.2)
    assert first["idle_ms"] == pytest.approx(0.05) and first["host_starved_ms"] == pytest.approx(0.04)
    # the host was late from 100 to 140 us: nonzero covers all 40, the sync within it 20; mm ran later
    assert first["host_ops_ms"] == pytest.approx({"aten::nonzero": 0.04, "cudaStreamSynchronize": 0.02})
    assert first["largest_gaps"][0]["next"] == "softmax"
    assert second["idle_ms"] == pytest.approx(0.01) and second["host_starved_ms"] == 0
    assert second["largest_gaps"] == [] and second["kernels_ms"] == {"gemm": pytest.approx(0.29)}
    assert first["sync_calls"] == {} and second["sync_calls"] == {}


def test_the_runtimes_synchronising_calls_inside_a_step_are_counted_and_the_timings_wait_after_it_is_not():
    marked = _two_steps()
    marked.launches += [Span(100, 120, "cudaStreamSynchronize"), Span(300, 301, "cudaStreamSynchronize")]
    marked.launches += [Span(950, 960, "cudaEventSynchronize")]  # after step 0's mark ends at 900
    first, second = timeline.per_step(marked)[0]
    assert first["sync_calls"] == {"cudaStreamSynchronize": 2} and second["sync_calls"] == {}


def test_a_kernel_queued_in_time_but_started_late_is_the_devices_gap():
    late_start = _two_steps()
    late_start.launches[1] = Span(60, 61, "cudaLaunchKernel", 2)  # launched while the GPU was busy
    first = timeline.per_step(late_start)[0][0]
    assert first["idle_ms"] == pytest.approx(0.05) and first["host_starved_ms"] == 0 and first["host_ops_ms"] == {}


def test_an_op_whose_launch_is_missing_goes_by_its_start_and_lowers_the_found_share():
    missing = _two_steps()
    missing.launches.pop(2)
    records, found = timeline.per_step(missing)
    assert found == 0.75 and [r["gpu_ops"] for r in records] == [2, 2]
    assert records[1]["unattributed_idle_ms"] == 0  # the op without a launch came first in its step: no gap
    missing.launches.pop(1)  # now the op after step 0's 50 us gap has none: its gap is not the host's
    first = timeline.per_step(missing)[0][0]
    assert first["host_starved_ms"] == 0 and first["unattributed_idle_ms"] == pytest.approx(0.05)


def test_where_the_correlation_ids_do_not_match_launches_pair_by_their_cpu_op_in_order():
    other = _two_steps()
    # every id renumbered on one side; each op and its launch still linked to the same CPU op (two ops of op 7)
    other.gpu = [dataclasses.replace(op, corr=op.corr + 100, linked=7 if op.corr < 3 else op.corr) for op in other.gpu]
    other.launches = [dataclasses.replace(s, linked=7 if s.corr < 3 else s.corr) for s in other.launches]
    records, found = timeline.per_step(other)
    assert found == 1.0 and records[0]["host_starved_ms"] == pytest.approx(0.04)


def test_ops_overlapping_on_two_streams_count_once_and_an_op_with_a_clock_off_is_dropped():
    steps = [Span(0, 500, f"{STEP_MARK}0")]
    # 10-100 on one stream, 20-50 inside it and 60-200 across its end on another, then 300-310 after a gap
    gpu = [Span(10, 100, "a", 1), Span(20, 50, "b", 2), Span(60, 200, "c", 3), Span(300, 310, "d", 4)]
    launches = [Span(5, 6, "l", 1), Span(15, 16, "l", 2), Span(55, 56, "l", 3), Span(290, 291, "l", 4)]
    skewed = Span(-1e11, -1e11 + 5, "a", 5)  # a kernel that "ran" long before its launch at 7 us
    records, found = timeline.per_step(Timeline([*gpu, skewed], [*launches, Span(7, 8, "l", 5)], [], steps))
    (only,) = records
    assert only["gpu_ops_dropped"] == 1 and only["gpu_ops"] == 4 and found == 1.0
    assert only["span_ms"] == pytest.approx(0.3) and only["busy_ms"] == pytest.approx(0.2)
    assert only["idle_ms"] == pytest.approx(0.1) and only["host_starved_ms"] == pytest.approx(0.09)


def test_without_activity_type_an_event_is_sorted_by_its_device_and_name():
    class Event:  # what an older torch's _KinetoEvent offers
        def __init__(self, name, device, linked=0):
            self._name, self._device, self._linked = name, device, linked

        def name(self):
            return self._name

        def device_type(self):
            return f"DeviceType.{self._device}"

        def linked_correlation_id(self):
            return self._linked

    class Annotation(Event):  # torch 2.11's: a record_function range, on the CPU and its span on the GPU
        def is_user_annotation(self):
            return True

    kinds = [timeline._kind(Event(*a)) for a in (("sm90_gemm", "CUDA"), ("Memcpy DtoH", "CUDA"),
             ("cudaLaunchKernel", "CPU", 4), ("cuLaunchKernelEx", "CPU"), (f"{STEP_MARK}3", "CPU"),
             ("aten::mm", "CPU"), ("cumsum_kernel_helper", "CPU"))]  # fmt: skip
    assert kinds == ["kernel", "gpu_memcpy", "cuda_runtime", "cuda_runtime", "user_annotation", "cpu_op", "cpu_op"]
    annotations = [timeline._kind(Annotation(f"{STEP_MARK}3", device)) for device in ("CUDA", "CPU")]
    assert annotations == ["gpu_user_annotation", "user_annotation"]  # the GPU's copy is no kernel


def test_compare_sets_bump_steps_beside_the_others():
    records = [
        {"span_ms": 10.0, "busy_ms": 9.0, "idle_ms": 1.0, "host_starved_ms": 0.5, "largest_gaps": [],
         "unattributed_idle_ms": 0, "kernels_ms": {"gemm": 8.0, "ce": 1.0}, "host_ops_ms": {"aten::mm": 0.5}},
        {"span_ms": 14.0, "busy_ms": 9.0, "idle_ms": 5.0, "host_starved_ms": 4.5, "largest_gaps": [{"idle_ms": 4}],
         "unattributed_idle_ms": 0, "kernels_ms": {"gemm": 8.0, "ce": 1.0},
         "host_ops_ms": {"aten::nonzero": 4.0, "aten::mm": 0.5}, "sync_calls": {"cudaStreamSynchronize": 4}},
        {"span_ms": 10.0, "busy_ms": 9.0, "idle_ms": 1.0, "host_starved_ms": 0.5, "largest_gaps": [],
         "unattributed_idle_ms": 0, "kernels_ms": {"gemm": 7.0, "ce": 2.0}, "host_ops_ms": {}},
    ]  # fmt: skip
    out = timeline.compare(records, bumps=[1])
    assert out["idle_ms"] == {"bumps": 5.0, "calm": 1.0} and out["host_starved_ms"]["bumps"] == 4.5
    assert out["sync_calls_per_step"] == {"bumps": 4, "calm": 0}
    assert out["host_ops_at_bumps_ms"][0] == ("aten::nonzero", 4.0)
    assert out["host_ops_calm_ms"] == [("aten::mm", 0.25)]
    assert dict(out["kernels_grew_ms"]) == {"gemm": 0.5, "ce": -0.5}
    assert out["largest_gaps_at_bumps"] == {1: [{"idle_ms": 4}]}


def test_a_real_cpu_profile_gives_its_steps_in_order_and_no_gpu_ops():
    model = torch.nn.Linear(16, 16)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(3):
            with record_function(f"{STEP_MARK}{i}"):
                model(torch.randn(4, 16)).sum().backward()
    got = timeline.spans(prof)
    assert [s.name for s in got.steps] == [f"{STEP_MARK}{i}" for i in range(3)]
    assert got.gpu == [] and any(s.name == "aten::linear" for s in got.cpu)
    records, found = timeline.per_step(got)
    assert len(records) == 3 and found == 0.0 and all(r["gpu_ops"] == 0 for r in records)
