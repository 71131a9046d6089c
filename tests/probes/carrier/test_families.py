"""The lab's other carriers through mask, carrier and profile on the CPU: hybrid linear attention (Qwen3.5)
and mixture of experts (Qwen3-MoE, Gemma-4), tiny configs of each (tests/probes/conftest.py)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from probes.carrier import probe as carrier
from probes.mask import probe as mask
from probes.profile import probe as profile


def probe_mask(checkpoint, **kw):
    return mask.run(mask.Config(checkpoint=checkpoint, **{"seq_len": 40, **kw}))


@pytest.mark.parametrize("name", ["hybrid", "qwen3_moe", "gemma4_moe"])
def test_mask_lists_every_layer_with_its_own_type(name, request):
    checkpoint = request.getfixturevalue(name)
    result = probe_mask(checkpoint)
    rows = result.tables["layers"]
    expected = {
        "hybrid": ["linear_attention"] * 3 + ["full_attention"],
        "qwen3_moe": ["full_attention"] * 2,
        "gemma4_moe": ["sliding_attention", "full_attention"],
    }[name]
    assert [r.layer_type for r in rows] == expected
    assert [r.layer for r in rows] == list(range(len(expected)))
    assert result.summary["num_layers"] == len(expected)
    assert all(c.ok for c in result.checks)


def test_linear_layers_get_a_recurrent_state_and_no_mask(hybrid):
    rows = probe_mask(hybrid).tables["layers"]
    linear = [r for r in rows if r.kind == "linear"]
    assert len(linear) == 3 and all(r.mask.startswith("none") and r.keys_min is None for r in linear)
    assert [r.head_dim for r in rows] == [8, 8, 8, 16]  # linear value head 8, full attention 16


def test_gemma4_flash_eligibility_is_judged_per_layer(tmp_path):
    """Gemma-4's real widths: full layers of head_dim 512 cannot use flash (<= 256), sliding ones of 256 can."""
    from conftest import TINY_FAMILIES
    from transformers import AutoConfig

    AutoConfig.for_model(
        "gemma4_text", **{**TINY_FAMILIES["gemma4_text"], "head_dim": 256, "global_head_dim": 512}
    ).save_pretrained(tmp_path)
    result = probe_mask(tmp_path, seq_len=4)  # rows shorter than the window: the sliding layer keeps no mask
    sliding, full = result.tables["layers"]
    assert (sliding.head_dim, full.head_dim) == (256, 512)
    assert sliding.fast_path and not full.fast_path
    # no mask and is_causal: the fast path is kept; the memory-efficient kernel runs it (no head_dim bound)
    assert (full.mask, full.is_causal, full.expected_backend) == ("none", True, "efficient")
    check = {c.name: c for c in result.checks}["fast_path_kept"]
    assert check.ok and "layers [1] (head_dim 512, bfloat16) are not flash-eligible" in check.detail


def test_packed_notes_count_masks_and_tell_a_hybrid_what_use_cache_cannot_do(hybrid, gemma4_moe):
    from probes.mask import answer

    packed = probe_mask(gemma4_moe, padding="packed", use_cache=False)
    check = {c.name: c for c in packed.checks}["fast_path_kept"]
    masked = sum(r.mask == "tensor" for r in packed.tables["layers"] if r.kind == "softmax" and r.window is None)
    assert check.detail.endswith(f"{masked} of 1 full-attention layers get one")
    result = probe_mask(hybrid, padding="packed", use_cache=False)
    tables = {"layers": pd.DataFrame([dataclasses.asdict(r) for r in result.tables["layers"]])}
    _, notes = answer.figures(tables, result.summary, {"seq_len": 40, "padding": "packed", "use_cache": False})
    assert not any("use_cache=False keeps" in n for n in notes)
    assert any(n.startswith("linear-attention layers carry their state") for n in notes)
    hint = {c.name: c for c in result.checks}["no_cross_sequence"].detail
    assert "return_seq_idx=True" in hint and "ignores the boundaries" not in hint


def test_a_hybrid_keeps_the_fast_path_on_all_its_softmax_layers(hybrid):
    from probes.step.masking.attention_calls import ForwardConfig
    from probes.step.masking.fast_path import all_layers

    assert all_layers(ForwardConfig(checkpoint=hybrid, seq_len=16, batch_size=2, padding="none")) is True
    assert all_layers(ForwardConfig(checkpoint=hybrid, seq_len=16, batch_size=2, padding="right")) is False


def test_a_global_sliding_window_without_layer_types_makes_sliding_rows(tmp_path):
    from conftest import TINY_FAMILIES
    from transformers import AutoConfig

    config = {**TINY_FAMILIES["qwen3_moe"], "use_sliding_window": True, "sliding_window": 8}
    AutoConfig.for_model("qwen3_moe", **config).save_pretrained(tmp_path)
    result = probe_mask(tmp_path, seq_len=24)
    assert [(r.layer_type, r.window) for r in result.tables["layers"]] == [("sliding_attention", 8)] * 2
    checks = {c.name: c for c in result.checks}
    assert checks["band_matches_window"].ok and checks["fast_path_kept"].detail == "no full-attention layers"


def test_the_packed_leak_is_caught_on_the_hybrid_and_names_its_layers(hybrid):
    result = probe_mask(hybrid, padding="packed", use_cache=False)
    rows = result.tables["layers"]
    assert [r.cross_sequence for r in rows] == [True, True, True, False]
    assert all(r.packed_rel_diff > 1e-3 for r in rows[:3]) and rows[3].packed_rel_diff < 1e-5
    check = {c.name: c for c in result.checks}["no_cross_sequence"]
    assert not check.ok and "layers [0, 1, 2]" in check.detail and "cu_seq_lens" in check.detail


@pytest.mark.parametrize("name", ["qwen3_moe", "gemma4_moe"])
def test_packed_moe_stays_apart_without_cache(name, request):
    rows = probe_mask(request.getfixturevalue(name), padding="packed", use_cache=False).tables["layers"]
    assert not any(r.cross_sequence for r in rows) and max(r.packed_rel_diff for r in rows) < 1e-5


def test_carrier_counts_only_states_lora_targets(qwen3_moe, gemma4_moe, hybrid):
    result = carrier.run(carrier.Config(checkpoint=(qwen3_moe, gemma4_moe, hybrid), steps=0, lora_rank=4))
    rows = {r.model: r for r in result.tables["carriers"]}
    assert all(r.params_active is not None for r in rows.values())
    targets = result.summary["lora_targets"]
    moe, gemma, hyb = (targets[p.name] for p in (qwen3_moe, gemma4_moe, hybrid))
    assert "mlp.gate.weight (router)" in moe["not_targeted"] and "mlp.experts.gate_up_proj" in moe["targeted"]
    assert "router.proj.weight (router)" in gemma["not_targeted"] and "experts.down_proj" in gemma["targeted"]
    assert not any("router" in t for t in gemma["targeted"])
    assert hyb["not_targeted"] == ["linear_attn.conv1d.weight"]


@pytest.fixture(scope="module")
def timed(qwen3_moe, gemma4_moe, hybrid):
    config = carrier.Config(
        checkpoint=(qwen3_moe, gemma4_moe, hybrid),
        weights="random",
        lora_rank=4,
        seq_len=16,
        warmup_steps=1,
        steps=1,
        max_steps=1,
        device="cpu",
        processes=1,
        numerics_steps=0,  # no test here reads the numerics (tests/probes/step/variants test them)
    )
    return carrier.run(config)


def test_a_tiny_timed_run_of_each_family(timed, hybrid):
    rows = {r.model: r for r in timed.tables["carriers"]}
    assert all(r.step_s > 0 and r.params_active <= r.params_total for r in rows.values())
    moe = [r for name, r in rows.items() if name != hybrid.name]
    assert all(r.params_active < r.params_total for r in moe)


def test_fast_kernels_fails_when_the_hybrid_ran_the_reference_kernels(timed, hybrid):
    rows = {r.model: r for r in timed.tables["carriers"]}
    assert "chunk_gated_delta_rule (flash-linear-attention)" in rows[hybrid.name].kernel_fallbacks
    assert all(r.kernel_fallbacks is None for name, r in rows.items() if name != hybrid.name)
    check = {c.name: c for c in timed.checks}["fast_kernels"]
    assert not check.ok and "pip install flash-linear-attention" in check.detail and hybrid.name in check.detail


def test_profile_runs_on_a_hybrid_and_reports_params(hybrid):
    result = profile.run(
        profile.Config(
            checkpoint=hybrid,
            weights="random",
            lora_rank=4,
            seq_lens=(8, 16, 24),
            seq_len=16,
            warmup_steps=0,
            steps=1,
            max_steps=1,
            ce_chunk=8,
            profile_steps=1,
            device="cpu",
        )
    )
    rows = result.tables["scaling"]
    assert all(r.params_total == r.params_active == result.summary["params_total"] for r in rows)
    # Timed without flash-linear-attention / causal-conv1d (and on a CPU): the same check as carrier's, failed.
    check = {c.name: c for c in result.checks}["fast_kernels"]
    assert not check.ok and "chunk_gated_delta_rule (flash-linear-attention)" in check.detail, check.detail
    assert "pip install flash-linear-attention" in check.detail and hybrid.name in check.detail
    assert "chunk_gated_delta_rule" in result.summary["kernel_fallbacks"]


@pytest.fixture(scope="module")
def linear_hybrid(tmp_path_factory):
    """Qwen3.5 text cut to one linear-attention layer: compiled, each layer kind (and the first layer, whose
    input needs no gradient) is a graph of its own; one is enough here."""
    from conftest import TINY_FAMILIES
    from transformers import AutoConfig

    path = tmp_path_factory.mktemp("linear_hybrid")
    config = {**TINY_FAMILIES["qwen3_5_text"], "num_hidden_layers": 1, "layer_types": ["linear_attention"]}
    AutoConfig.for_model("qwen3_5_text", **config).save_pretrained(path)
    return path


def test_a_compiled_hybrid_still_names_its_reference_kernels(linear_hybrid, monkeypatch):
    """Under dynamo transformers does not log the fallback; the compiled row must say it all the same.
    What hides the log is dynamo's tracing (transformers asks is_torchdynamo_compiling()), not Inductor: the
    measurement runs dynamo with its `eager` backend, through PyTorch's own debugging override, which dynamo reads
    as it is imported (in the preload server, or in a spawned worker). Without the worker's eager forward before
    compiling this test fails under either backend. Inductor's kernels for this layer took ~80 s of a 2-core CPU
    (the test: 96 s -> 15 s); what is given up is Inductor's C++ build of the hybrid's reference layer, PyTorch's
    to keep working (on a GPU a hybrid runs fla's Triton kernels). test_variants compiles with Inductor.
    A torch without the override ignores the variable and compiles with Inductor."""
    import torch._dynamo  # noqa: F401  (read its config before the variable is set: this process keeps Inductor)

    monkeypatch.setenv("TORCH_COMPILE_OVERRIDE_BACKENDS", ">=0:eager")
    hybrid = linear_hybrid
    result = carrier.run(
        carrier.Config(
            checkpoint=(hybrid,), weights="random", lora_rank=4, seq_len=16, warmup_steps=1, steps=1, max_steps=1,
            device="cpu", processes=1, numerics_steps=0, variant=("compile",),
        )
    )  # fmt: skip
    rows = {r.variant: r for r in result.tables["carriers"]}
    assert "chunk_gated_delta_rule (flash-linear-attention)" in rows["compile"].kernel_fallbacks
    assert f"{hybrid.name}/compile" in {c.name: c for c in result.checks}["fast_kernels"].detail
