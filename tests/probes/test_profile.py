"""profile: the fit against synthetic timings with known coefficients, the kernel table against a real
CPU profile (nothing counted twice), and the whole probe on a tiny random Qwen3 on the CPU."""

from __future__ import annotations

import statistics
import time
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
                                      seq_len=16, warmup_steps=1, steps=2, max_steps=2, ce_chunk=8,
                                      profile_steps=2, device="cpu"))


def test_the_probe_runs_on_the_cpu_with_every_table(result):
    scaling = result.tables["scaling"]
    assert [r.seq_len for r in scaling] == [8, 16, 24, 32] and all(r.status == "ok" for r in scaling)
    assert all(r.in_fit and r.gpu_busy_frac is None for r in scaling)  # CPU: nothing launch-bound
    assert [f.term for f in result.tables["fit"]] == ["quadratic", "linear", "fixed"]
    assert sum(f.share_at_production_pct for f in result.tables["fit"]) == pytest.approx(100)
    padding = {r.case: r for r in result.tables["padding_penalty"]}
    assert list(padding) == ["unpadded_same_shape", "unpadded_same_tokens", "half_padded"]
    assert padding["unpadded_same_shape"].fast_path_all_layers is True
    assert padding["unpadded_same_tokens"].fast_path_all_layers is True
    assert padding["half_padded"].fast_path_all_layers is False
    assert padding["half_padded"].real_tokens == padding["unpadded_same_tokens"].real_tokens == 16 + 8
    assert padding["unpadded_same_shape"].real_tokens == 32 and padding["unpadded_same_tokens"].shape == "1x16+1x8"
    padded = padding["half_padded"]
    for ref, name in (("unpadded_same_shape", "same_shape"), ("unpadded_same_tokens", "same_tokens")):
        assert getattr(padded, f"penalty_{name}_s") == pytest.approx(padded.step_s - padding[ref].step_s)
        assert getattr(padded, f"penalty_{name}_pct") == pytest.approx(
            100 * (padded.step_s - padding[ref].step_s) / padding[ref].step_s)
    assert [r.mode for r in result.tables["ce"]] == ["chunked", "unchunked"]
    step_s = {r.seq_len: r.step_s for r in scaling}[16]
    assert all(r.share_of_step_pct == pytest.approx(100 * r.ce_s / step_s) for r in result.tables["ce"])
    assert result.summary["step_s_source"] == "measured"
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
                                     seq_len=16, warmup_steps=0, steps=1, max_steps=1,
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


def test_micro_batches_give_the_gradient_of_the_half_padded_batch(tiny):
    """The same-real-tokens reference: a full row and a half row as two maskless micro-batches
    accumulate the gradient that one right-padded batch of both gives (causal: padding on the right
    changes no real token's output), so the two cases do the same work on the same tokens."""
    harness = reference.load_harness(reference.REFERENCE)
    torch.manual_seed(0)
    model = models.with_lora(models.build_model(tiny, weights="random", device=torch.device("cpu"),
                                                dtype=torch.float64), harness, rank=4, alpha=8)
    for p in model.parameters():  # PEFT zero-initialises B: give every adapter a gradient path
        if p.requires_grad:
            torch.nn.init.normal_(p, std=0.1)
    ids = torch.randint(1, 128, (2, 16), generator=torch.Generator().manual_seed(3))

    def grads(batch):
        step = models.train_step(model, harness, batch, chunk_tokens=5)
        step.optimizer.step = lambda: None  # keep the weights: compare gradients only
        step.optimizer.zero_grad = lambda **_: None
        model.zero_grad(set_to_none=True)
        loss = step()
        return loss, [p.grad.clone() for p in model.parameters() if p.requires_grad]

    real = torch.arange(16)[None, :] < torch.tensor([[16], [8]])
    padded = {"input_ids": ids.masked_fill(~real, 0), "labels": ids.masked_fill(~real, -100),
              "attention_mask": real.long()}
    micro = [{"input_ids": ids[:1], "labels": ids[:1].clone()}, {"input_ids": ids[1:, :8], "labels": ids[1:, :8].clone()}]
    loss_p, grads_p = grads(padded)
    loss_m, grads_m = grads(micro)
    torch.testing.assert_close(loss_m, loss_p)
    for a, b in zip(grads_m, grads_p):
        torch.testing.assert_close(a, b)


def test_three_fitted_points_fail_the_heldout_check_as_not_measured(tiny):
    out = profile.run(profile.Config(checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 24),
                                     seq_len=16, warmup_steps=0, steps=1, max_steps=1, profile_steps=1,
                                     device="cpu"))
    check = {c.name: c for c in out.checks}["heldout_err_le_5pct"]
    assert not check.ok and "not measured" in check.detail and "got 3" in check.detail
    assert {c.name: c for c in out.checks}["fit_has_3_points"].ok


def test_ce_share_uses_the_fitted_step_when_seq_len_was_not_measured(tiny):
    out = profile.run(profile.Config(checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 32),
                                     seq_len=24, warmup_steps=0, steps=1, max_steps=1, profile_steps=1,
                                     device="cpu"))
    a, b, c = (f.coef for f in out.tables["fit"])
    fitted = a * 24 * 24 + b * 24 + c  # batch 1
    assert out.summary["step_s_source"] == "fitted" and out.summary["step_s"] == pytest.approx(fitted)
    for row in out.tables["ce"]:
        assert row.share_of_step_pct == pytest.approx(100 * row.ce_s / fitted)


def test_an_oom_while_loading_is_a_result_not_a_crash(tiny, monkeypatch):
    def with_lora(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(models, "with_lora", with_lora)
    out = profile.run(profile.Config(checkpoint=tiny, weights="random", seq_lens=(8, 16, 24), seq_len=16,
                                     device="cpu"))
    assert [r.status.startswith("oom while loading") for r in out.tables["scaling"]] == [True] * 3
    assert [c.name for c in out.checks if not c.ok] == ["model_loaded"]


def test_default_lengths_are_five_from_2048_to_12288(tiny):
    assert profile.Config(checkpoint=tiny).seq_lens == (2048, 4096, 6144, 8192, 12288)


def test_kernel_table_against_known_ops_and_a_separately_timed_wall():
    """Independent of the table's formula: a step made of known ops. Its calls per step are known
    by construction (and key_averages() counts the same); its kernel time per step is close to the
    step's wall clock timed without the profiler (an op counted with its child would double it)."""
    x = torch.randn(384, 384, generator=torch.Generator().manual_seed(0))

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
    assert 0.5 * statistics.median(walls) <= total <= 1.5 * statistics.median(walls)

