"""profile: the fit against synthetic timings with known coefficients, the kernel table against a real
CPU profile (nothing counted twice), and the whole probe on a tiny random Qwen3 on the CPU."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.autograd import DeviceType
from transformers import Qwen3Config

from probes import kernels, models, profile
from probes import harness as reference
from probes.result import InputError


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny")
    Qwen3Config(hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
                head_dim=16, vocab_size=128, num_hidden_layers=2, tie_word_embeddings=True).save_pretrained(path)
    return path


def test_fit_recovers_known_coefficients():
    a, b, c, batch = 3e-9, 2e-5, 0.04, 2
    lens = [1024, 2048, 4096, 6144, 8192]
    times = [a * batch * n * n + b * batch * n + c for n in lens]
    coef = profile.fit_terms(lens, times, batch)
    np.testing.assert_allclose(coef, [a, b, c], rtol=1e-6)
    assert max(profile.heldout_errors(lens, times, batch)) < 1e-6


def test_three_points_are_interpolated_exactly_and_have_no_heldout_error():
    lens, times = [512, 1500, 4096], [0.31, 0.29, 0.95]  # not even monotone: still exact
    coef = profile.fit_terms(lens, times, 1)
    for n, t in zip(lens, times):
        assert coef[0] * n * n + coef[1] * n + coef[2] == pytest.approx(t, rel=1e-9)
    assert profile.heldout_errors(lens, times, 1) == [None, None, None]


def test_heldout_error_is_the_prediction_from_the_other_points():
    lens, times = [1, 2, 3, 4], [1.0, 4.0, 9.0, 17.0]  # t = L^2 except the last point
    errors = profile.heldout_errors(lens, times, 1)
    # leaving out L=4: the other three give exactly L^2, predicting 16 against 17
    assert errors[3] == pytest.approx(1 / 17)


@pytest.fixture(scope="module")
def cpu_profile(tiny) -> kernels.Profile:
    harness = reference.load_harness(reference.REFERENCE)
    model = models.with_lora(models.build_model(tiny, weights="random", device=torch.device("cpu")),
                             harness, rank=4, alpha=8)
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


@pytest.mark.parametrize("name, category", [
    ("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8", "fp32 GEMM"),
    ("nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_TNT", "bf16 GEMM"),
    ("cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16", "attention"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda", "copy and cast"),
    ("Memcpy DtoD (Device -> Device)", "memcpy and memset"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax and CE"),
    ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<4>, FusedAdamMathFunctor>", "optimizer"),
])
def test_kernel_names_seen_on_an_h200_fall_in_their_category(name, category):
    assert kernels.categorize(name) == category


@pytest.fixture(scope="module")
def result(tiny):
    return profile.run(profile.Config(checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 24, 32),
                                      production_len=16, warmup_steps=1, steps=2, max_steps=2, ce_chunk=8,
                                      profile_steps=2, device="cpu"))


def test_the_probe_runs_on_the_cpu_with_every_table(result):
    scaling = result.tables["scaling"]
    assert [r.seq_len for r in scaling] == [8, 16, 24, 32] and all(r.status == "ok" for r in scaling)
    assert all(r.in_fit and r.gpu_busy_frac is None for r in scaling)  # CPU: nothing launch-bound
    assert [f.term for f in result.tables["fit"]] == ["quadratic", "linear", "fixed"]
    assert sum(f.share_at_production_pct for f in result.tables["fit"]) == pytest.approx(100)
    padding = {r.case: r for r in result.tables["padding_penalty"]}
    assert padding["unpadded"].fast_path_all_layers is True and padding["half_padded"].fast_path_all_layers is False
    assert padding["half_padded"].real_tokens == 16 + 8
    assert padding["half_padded"].penalty_s == pytest.approx(padding["half_padded"].step_s - padding["unpadded"].step_s)
    assert [r.mode for r in result.tables["ce"]] == ["chunked", "unchunked"]
    assert result.tables["kernels"] and result.summary["gpu_busy_frac"] is None
    assert "kernels_key_averages.txt" in result.artifacts and "scaling/8" in result.artifacts["timings.json"]


def test_an_oom_at_one_length_is_a_row_not_a_crash(tiny, monkeypatch):
    real_step = profile._Session.step

    def step(self, batch_size, seq_len, real_lengths=None):
        if seq_len == 24:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real_step(self, batch_size, seq_len, real_lengths)

    monkeypatch.setattr(profile._Session, "step", step)
    out = profile.run(profile.Config(checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 24, 32),
                                     production_len=16, warmup_steps=0, steps=1, max_steps=1,
                                     profile_steps=1, device="cpu"))
    rows = {r.seq_len: r for r in out.tables["scaling"]}
    assert rows[24].status.startswith("oom") and rows[24].step_s is None and not rows[24].in_fit
    assert all(rows[n].status == "ok" and rows[n].in_fit for n in (8, 16, 32))
    assert out.tables["fit"]


def test_fewer_than_three_lengths_is_an_input_error(tiny):
    with pytest.raises(InputError, match="--seq-lens"):
        profile.Config(checkpoint=tiny, seq_lens=(1024, 2048, 2048))


def test_gpu_user_annotations_are_not_kernel_rows(cpu_profile):
    """On CUDA, record_function spans (Optimizer.step#AdamW.step) appear as device rows covering the
    kernels inside them: counting them double-counts the optimizer. Rows shaped as torch builds them."""
    from types import SimpleNamespace

    def row(name, annotation, start, end):
        return SimpleNamespace(name=name, device_type=DeviceType.CUDA, is_async=False,
                               is_user_annotation=annotation, time_range=SimpleNamespace(
                                   start=start, end=end, elapsed_us=lambda: end - start))

    events = [row("Optimizer.step#AdamW.step", True, 0, 100),
              row("multi_tensor_apply_kernel<FusedAdamMathFunctor>", False, 10, 30),
              row("nvjet_sm90_tst_320x128", False, 120, 170)]
    prof = kernels.Profile(events, 1, DeviceType.CUDA, "", 1.0)
    assert [e.name for e in kernels.device_rows(events, DeviceType.CUDA)] == [e.name for e in events[1:]]
    assert prof.kernel_s_per_step == pytest.approx(70e-6)
    table = {r.category: r.kernel_s_per_step for r in kernels.kernel_table(prof)}
    assert table == pytest.approx({"optimizer": 20e-6, "bf16 GEMM": 50e-6})
    # on the CPU, an annotation's self time is its own (children excluded): it stays counted
    cpu_annotations = [e for e in cpu_profile.events if e.device_type == DeviceType.CPU and e.is_user_annotation]
    assert cpu_annotations and all(e in kernels.device_rows(cpu_profile.events, DeviceType.CPU)
                                   for e in cpu_annotations)
