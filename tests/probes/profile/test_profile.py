"""profile: the whole probe on a tiny random Qwen3 on the CPU (every table, an OOM as a row or a
result, the held-out check and the CE share), and the micro-batch reference of the padding penalty.
The fit is tested in tests/probes/step/steptime/test_fit.py, the kernel table in test_kernels.py."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from probes.profile import probe as profile
from probes.result import InputError
from probes.step import harness as reference
from probes.step import session as step_session
from probes.step.train import models


@pytest.fixture(scope="module")
def result(tiny):
    return profile.run(
        profile.Config(
            checkpoint=tiny,
            weights="random",
            lora_rank=4,
            seq_lens=(8, 16, 24, 32),
            seq_len=16,
            warmup_steps=1,
            steps=2,
            max_steps=2,
            ce_chunk=8,
            profile_steps=2,
            device="cpu",
        )
    )


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
            100 * (padded.step_s - padding[ref].step_s) / padding[ref].step_s
        )
    assert [r.mode for r in result.tables["ce"]] == ["chunked", "unchunked"]
    step_s = {r.seq_len: r.step_s for r in scaling}[16]
    assert all(r.share_of_step_pct == pytest.approx(100 * r.ce_s / step_s) for r in result.tables["ce"])
    assert result.summary["step_s_source"] == "measured"
    assert result.tables["kernels"] and result.summary["gpu_busy_frac"] is None
    assert "kernels_key_averages.txt" in result.artifacts and "scaling/8" in result.artifacts["timings.json"]
    # the reference harness's loss reads nothing back: the step's one wait is transformers' mask code
    waits = result.tables["syncs"]
    assert not [w for w in waits if w.where.startswith("step/harness.py")]
    assert result.summary["host_waits_per_step"] == sum(w.count_per_step for w in waits)
    # a dense model has no fast kernels to miss: carrier's fast_kernels check, passed
    fast = {c.name: c for c in result.checks}["fast_kernels"]
    assert fast.ok and result.summary["kernel_fallbacks"] is None, fast.detail


def test_a_harness_that_logs_its_loss_every_step_is_named_in_the_syncs_table(tiny, tmp_path, monkeypatch):
    (tmp_path / "logging_harness.py").write_text(
        "from probes.step.harness import apply_lora, discover_target_modules  # noqa: F401\n"
        "from probes.step.harness import compute_loss as reference_loss\n"
        "LOSSES = []\n"
        "def compute_loss(model, batch):\n"
        "    loss = reference_loss(model, batch)\n"
        "    LOSSES.append(loss.item())  # a lab's logging: on a GPU it waits for the step's forward\n"
        "    return loss\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = profile.run(
        profile.Config(
            checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 24), seq_len=16, warmup_steps=0,
            steps=1, max_steps=1, profile_steps=1, device="cpu", harness="logging_harness",
        )
    )  # fmt: skip
    logged = [w for w in out.tables["syncs"] if w.where == f"{tmp_path.name}/logging_harness.py:6"]
    assert [(w.what, w.count_per_step) for w in logged] == [("_local_scalar_dense", 1)]
    assert out.summary["host_waits_per_step"] >= 1


def test_an_oom_at_one_length_is_a_row_not_a_crash(tiny, monkeypatch):
    real_step = step_session.Session.step

    def step(self, batch_size, seq_len, real_lengths=None):
        if seq_len == 24:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 9.00 GiB")
        return real_step(self, batch_size, seq_len, real_lengths)

    monkeypatch.setattr(step_session.Session, "step", step)
    out = profile.run(
        profile.Config(
            checkpoint=tiny,
            weights="random",
            lora_rank=4,
            seq_lens=(8, 16, 24, 32),
            seq_len=16,
            warmup_steps=0,
            steps=1,
            max_steps=1,
            profile_steps=1,
            device="cpu",
        )
    )
    rows = {r.seq_len: r for r in out.tables["scaling"]}
    assert rows[24].status.startswith("oom") and rows[24].step_s is None and not rows[24].in_fit
    assert all(rows[n].status == "ok" and rows[n].in_fit for n in (8, 16, 32))
    assert out.tables["fit"]


def test_fewer_than_three_lengths_is_an_input_error(tiny):
    with pytest.raises(InputError, match="seq_lens needs >= 3"):
        profile.Config(checkpoint=tiny, seq_lens=(1024, 2048, 2048))


def test_micro_batches_give_the_gradient_of_the_half_padded_batch(tiny):
    """The same-real-tokens reference: a full row and a half row as two maskless micro-batches
    accumulate the gradient that one right-padded batch of both gives (causal: padding on the right
    changes no real token's output), so the two cases do the same work on the same tokens."""
    harness = reference.load_harness(reference.REFERENCE)
    torch.manual_seed(0)
    model = models.with_lora(
        models.build_model(tiny, weights="random", device=torch.device("cpu"), dtype=torch.float64),
        harness,
        rank=4,
        alpha=8,
    )
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
    padded = {
        "input_ids": ids.masked_fill(~real, 0),
        "labels": ids.masked_fill(~real, -100),
        "attention_mask": real.long(),
    }
    micro = [
        {"input_ids": ids[:1], "labels": ids[:1].clone()},
        {"input_ids": ids[1:, :8], "labels": ids[1:, :8].clone()},
    ]
    loss_p, grads_p = grads(padded)
    loss_m, grads_m = grads(micro)
    torch.testing.assert_close(loss_m, loss_p)
    for a, b in zip(grads_m, grads_p):
        torch.testing.assert_close(a, b)


@pytest.fixture(scope="module")
def census_broken(tiny):
    """Three lengths, one step each, with a sync census that raises: one run for the two tests below (the
    held-out check and the fit read the timings, which the census comes after)."""
    from probes.step.measure import syncs

    def census(step, device):
        raise RuntimeError("a dispatch mode met a compiled graph\nsecond line")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(syncs, "census", census)
        return profile.run(
            profile.Config(
                checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 24), seq_len=16, warmup_steps=0,
                steps=1, max_steps=1, profile_steps=1, device="cpu",
            )
        )  # fmt: skip


def test_three_fitted_points_fail_the_heldout_check_as_not_measured(census_broken):
    out = census_broken
    check = {c.name: c for c in out.checks}["heldout_err_le_5pct"]
    assert not check.ok and "not measured" in check.detail and "got 3" in check.detail
    assert {c.name: c for c in out.checks}["fit_has_3_points"].ok


def test_ce_share_uses_the_fitted_step_when_seq_len_was_not_measured(tiny):
    out = profile.run(
        profile.Config(
            checkpoint=tiny,
            weights="random",
            lora_rank=4,
            seq_lens=(8, 16, 32),
            seq_len=24,
            warmup_steps=0,
            steps=1,
            max_steps=1,
            profile_steps=1,
            device="cpu",
        )
    )
    a, b, c = (f.coef for f in out.tables["fit"])
    fitted = a * 24 * 24 + b * 24 + c  # batch 1
    assert out.summary["step_s_source"] == "fitted" and out.summary["step_s"] == pytest.approx(fitted)
    check = {c.name: c for c in out.checks}["production_step_in_fit"]
    # one timed step a length on a busy CPU: the curve through three points can dip below zero at 24 (a slow
    # first step at 8); then there is no step time to share, and the check says so
    assert check.ok == (fitted > 0) and (fitted > 0 or "no step time" in check.detail)
    for row in out.tables["ce"]:
        assert row.share_of_step_pct == (pytest.approx(100 * row.ce_s / fitted) if fitted > 0 else None)


def test_a_fit_that_dips_below_zero_gives_no_ce_share():
    from probes.profile.measure import CeRow, with_ce_share

    row = CeRow(**{f.name: None for f in dataclasses.fields(CeRow)} | {"ce_s": 0.01})
    assert with_ce_share([row], -0.03)[0].share_of_step_pct is None
    assert with_ce_share([row], 0.05)[0].share_of_step_pct == pytest.approx(20.0)


def test_a_production_length_beyond_the_fit_is_said_extrapolated_and_fails_its_check(tiny):
    out = profile.run(
        profile.Config(
            checkpoint=tiny, weights="random", lora_rank=4, seq_lens=(8, 16, 32), seq_len=96, warmup_steps=0,
            steps=1, max_steps=1, profile_steps=1, device="cpu",
        )
    )  # fmt: skip
    assert out.summary["step_s_source"] == "extrapolated beyond the fitted lengths 8-32"
    check = {c.name: c for c in out.checks}["production_step_in_fit"]
    assert not check.ok  # extrapolated, or (a noisy CPU fit) no step time at all
    assert check.detail.startswith("--seq-len 96: step_s extrapolated") or "no step time" in check.detail


def test_a_step_the_sync_census_breaks_still_gives_its_profile_and_says_why(census_broken):
    out = census_broken
    assert out.tables["syncs"] == [] and out.summary["host_waits_per_step"] is None
    assert out.summary["syncs_census"] == "not taken: RuntimeError: a dispatch mode met a compiled graph"
    assert out.tables["kernels"] and out.summary["step_s"] is not None


def test_an_oom_while_loading_is_a_result_not_a_crash(tiny, monkeypatch):
    def with_lora(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(models, "with_lora", with_lora)
    out = profile.run(profile.Config(checkpoint=tiny, weights="random", seq_lens=(8, 16, 24), seq_len=16, device="cpu"))
    assert [r.status.startswith("oom while loading") for r in out.tables["scaling"]] == [True] * 3
    assert [c.name for c in out.checks if not c.ok] == ["model_loaded"]


def test_default_lengths_are_five_from_2048_to_12288(tiny):
    assert profile.Config(checkpoint=tiny).seq_lens == (2048, 4096, 6144, 8192, 12288)


def test_a_padding_penalty_hidden_in_noisy_cases_fails_its_check():
    from probes.profile.measure import PaddingRow

    def rows(penalty, spread_padded, spread_unpadded):
        kw = dict(shape="2x64", real_tokens=96, attention_mask=True, fast_path_all_layers=False, step_s=1.0)
        padded = PaddingRow(case="half_padded", spread_pct=spread_padded, penalty_same_shape_pct=penalty, **kw)
        return padded, PaddingRow(case="unpadded_same_shape", spread_pct=spread_unpadded, **kw)

    assert profile._penalty_check(*rows(30.4, 75.0, 187.0)).ok is False  # a CPU run's: noise, not a penalty
    assert profile._penalty_check(*rows(0.3, 0.4, 0.5)).ok  # quiet cases: a small penalty is one
    assert profile._penalty_check(*rows(12.0, 3.0, 4.0)).ok  # above the noise
