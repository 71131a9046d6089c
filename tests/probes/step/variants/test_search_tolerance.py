"""The search ranks stacks by speed within the numerics tolerance (issue 41): a faster stack outside it is priced,
never chosen, and the settings are the winner's; CUDA graphs are tried only beside a launch-bound stack; the lab's
hybrid and MoE carriers are searched like the dense one."""

from __future__ import annotations

import dataclasses

import pytest

from probes.carrier import probe as carrier
from probes.step.variants import catalog, search
from probes.step.variants.measurement import Measurement

STEP = dict(weights="random", lora_rank=4, seq_len=16, batch_size=2, warmup_steps=1, steps=2, max_steps=2, device="cpu")
LOSSES = [2.0, 1.5, 1.0]
WITHIN = {"losses": LOSSES, "rounded_away_pct": [0.0, 0.0, 0.0], "probe_loss": 2.0, "grad_cosine": 1.0,
          "grad_norm_ratio": 1.0}  # fmt: skip
ROUNDED_AWAY = {**WITHIN, "rounded_away_pct": [5.0, 7.0, 9.0]}
"""What bf16 adapters do: updates below the weights' resolution lost (9% at the last step, over the 1% bound)."""


def _faked(tiny, monkeypatch, speed: dict[str, float], candidates: tuple[str, ...], busy: float | None = None):
    """The search with each process faked at its step time, its numerics those of bf16 adapters when it holds
    them (else the baseline's), its GPU `busy`: (the stacks measured in order, the carrier result)."""
    measured = []

    def fake_run(spec, timeout_s=0):
        name = spec.variant.name
        measured.append(name)
        record = ROUNDED_AWAY if "bf16-adapters" in name else WITHIN
        return Measurement(variant=spec.variant, step_s=speed[name], mean_all_s=speed[name], spread_pct=0.1,
                           trustworthy=True, numerics=dict(record), gpu_busy_frac=busy)  # fmt: skip

    def fake_baseline(spec, chosen, n):
        out = fake_run(dataclasses.replace(spec, variant=catalog.BASELINE_VARIANT))
        out.spread_across_pct, out.processes = 0.5, n
        out.numerics = {"losses": LOSSES, "rounded_away_pct": [0.0, 0.0, 0.0], "probe_loss": 2.0}
        return out

    monkeypatch.setattr(search.processes, "run", fake_run)
    monkeypatch.setattr(search.processes, "measure_baseline", fake_baseline)
    config = carrier.Config(checkpoint=(tiny,), **STEP, processes=2, numerics_steps=3, search=True, variant=candidates)
    return measured, carrier.run(config)


SPEED = {
    "baseline": 1.0,
    "bf16-autocast": 0.8,
    "bf16-adapters": 0.5,
    "compile": 0.6,
    "fused-adamw": 0.98,
    "bf16-autocast+compile": 0.45,
    "compile+fused-adamw": 0.58,
    "bf16-autocast+compile+fused-adamw": 0.42,
    "bf16-adapters+compile+fused-adamw": 0.38,
}


def test_the_winner_is_the_fastest_within_tolerance_and_the_faster_stack_outside_is_priced(tiny, monkeypatch):
    candidates = ("bf16-autocast", "bf16-adapters", "compile", "fused-adamw")
    measured, result = _faked(tiny, monkeypatch, SPEED, candidates)
    # bf16-adapters is outside alone: priced once, not stacked in the rounds, then once onto the winner in its place
    assert "bf16-adapters+compile" not in measured and measured[-1] == "bf16-adapters+compile+fused-adamw"
    assert result.summary["search_best"] == ["bf16-autocast+compile+fused-adamw"]
    rows = {r.stack: r for r in result.tables["search"]}
    assert rows["bf16-adapters"].within_tolerance is False and "updates rounded away 9" in rows["bf16-adapters"].outside
    assert (
        rows["bf16-autocast+compile+fused-adamw"].within_tolerance and rows["bf16-autocast+compile+fused-adamw"].chosen
    )
    assert [r.stack for r in result.tables["search"] if r.chosen] == [
        "compile", "bf16-autocast+compile", "bf16-autocast+compile+fused-adamw"]  # fmt: skip
    # predicted before measured: the swapped stack from the largest measured stack inside it (compile+fused-adamw,
    # measured in round 2), not from the winner through bf16-autocast's ratio
    assert rows["bf16-adapters+compile+fused-adamw"].predicted_step_s == pytest.approx(0.58 * 0.5)
    assert rows["bf16-autocast+compile+fused-adamw"].predicted_step_s == pytest.approx(0.45 * 0.98)  # it grew
    assert rows["bf16-autocast+compile+fused-adamw"].predicted_from_singles_step_s == pytest.approx(0.8 * 0.6 * 0.98)
    winner, fastest = 1.0 / 0.42, 1.0 / 0.38
    assert result.summary["search_outside"] == [
        f"fastest outside the numerics tolerance: bf16-adapters+compile+fused-adamw, x{fastest:.3f} the baseline's "
        f"tok/s against the winner's x{winner:.3f} ({100 * (0.42 - 0.38) / 0.42:+.1f}% of the winner's step), at the "
        "cost of: updates rounded away 9"
    ]
    head = result.summary["settings"][0]
    assert head == f"{tiny.name}: the search's best bf16-autocast+compile+fused-adamw, x{winner:.3f} the baseline's " \
        "tok/s (numerics within tolerance)"  # fmt: skip
    assert any("TrainingArguments(bf16=True)" in line for line in result.summary["settings"])
    assert not any("autocast_adapter_dtype=False" in line for line in result.summary["settings"])


def test_a_round_with_no_addition_within_tolerance_stops_the_search(tiny, monkeypatch):
    speed = {"baseline": 1.0, "compile": 0.6, "bf16-adapters": 0.5, "bf16-adapters+compile": 0.3}
    measured, result = _faked(tiny, monkeypatch, {**speed, "compile+fused-adamw": 0.7, "fused-adamw": 1.0},
                              ("compile", "bf16-adapters", "fused-adamw"))  # fmt: skip
    assert result.summary["search_best"] == ["compile"]
    assert result.summary["search_stop"] == ["round 2: the best addition within the tolerance (compile+fused-adamw) gains -16.67%, "
                                             "under the noise 0.50%"]  # fmt: skip
    assert measured[-1] == "bf16-adapters+compile" and result.summary["search_outside"][0].startswith(
        "fastest outside the numerics tolerance: bf16-adapters+compile, x3.333"
    )


def test_without_numerics_the_search_says_it_ranked_by_speed_alone(tiny, monkeypatch):
    monkeypatch.setattr(search.processes, "run", lambda spec, timeout_s=0: Measurement(
        variant=spec.variant, step_s=SPEED[spec.variant.name], mean_all_s=1.0, spread_pct=0.1, trustworthy=True))  # fmt: skip

    def fake_baseline(spec, chosen, n):
        return Measurement(variant=spec.variant, step_s=1.0, mean_all_s=1.0, spread_pct=0.1, trustworthy=True)

    monkeypatch.setattr(search.processes, "measure_baseline", fake_baseline)
    config = carrier.Config(checkpoint=(tiny,), **STEP, numerics_steps=0, search=True, variant=("bf16-adapters",))
    result = carrier.run(config)
    assert result.summary["search_best"] == ["bf16-adapters"]
    assert result.summary["search_stop"][0].endswith("; no numerics measured: ranked by speed alone")
    assert "search_outside" not in result.summary


@pytest.mark.parametrize(("busy", "tried"), [(0.95, False), (0.5, True)])
def test_cuda_graphs_are_tried_only_beside_a_launch_bound_stack(tiny, monkeypatch, busy, tried):
    speed = {"baseline": 1.0, "compile": 0.6, "cuda-graphs": 0.5, "compile+cuda-graphs": 0.5}
    measured, result = _faked(tiny, monkeypatch, speed, ("compile", "cuda-graphs"), busy=busy)
    assert ("cuda-graphs" in measured) is tried
    skipped = result.summary["search_skipped"]
    if tried:
        assert skipped == [] and result.summary["search_best"] == ["cuda-graphs"]
    else:  # skipped once, with the reason, though every round's stack was GPU-bound
        assert skipped == ["cuda-graphs: baseline is GPU-bound (busy >= 90% of its step): no launch gap to remove"]
        assert measured == ["baseline", "compile"] and result.summary["search_best"] == ["compile"]


@pytest.mark.parametrize("family", ["hybrid", "qwen3_moe"])
def test_the_hybrid_and_moe_carriers_are_searched(family, request):
    """Qwen3.5 (linear attention; fla's torch fallback on a CPU) and Qwen3-MoE from tiny configs, each stack in its
    own process: the search measures, prices and advises them as it does the dense model."""
    checkpoint = request.getfixturevalue(family)
    result = carrier.run(
        carrier.Config(
            checkpoint=(checkpoint,),
            **STEP,
            harness="benchmarks.harness_plain",
            processes=1,
            numerics_steps=3,
            search=True,
            variant=("micro-batch=1", "bf16-autocast"),
        )  # fmt: skip
    )
    rows = result.tables["search"]
    assert [r.stack for r in rows if r.round == 1] == ["micro-batch=1", "bf16-autocast"]
    assert all(r.measured_step_s and r.status == "ok" for r in rows), [(r.stack, r.status) for r in rows]
    assert all(r.within_tolerance is True for r in rows), [(r.stack, r.outside) for r in rows]
    assert {r.variant for r in result.tables["numerics"]} == {"baseline", *(r.stack for r in rows)}
    assert {c.name: c for c in result.checks}["all_measured"].ok
    best = result.summary["search_best"][0]
    assert result.summary["settings"][0].startswith(f"{checkpoint.name}: the search's best {best}")
    if family == "qwen3_moe":  # the experts counted at top_k of num_experts
        baseline = next(r for r in result.tables["carriers"] if r.variant == "baseline")
        assert baseline.params_active < baseline.params_total


def test_a_stack_candidate_counts_as_one_in_the_predictions(tiny, monkeypatch):
    """`compile+fused-adamw` asked for as one candidate is measured alone in round 1 and predicts its stacks."""
    speed = {**SPEED, "compile+fused-adamw": 0.58}
    measured, result = _faked(tiny, monkeypatch, speed, ("bf16-autocast", "compile+fused-adamw"))
    assert measured == ["baseline", "bf16-autocast", "compile+fused-adamw", "bf16-autocast+compile+fused-adamw"]
    row = next(r for r in result.tables["search"] if r.stack == "bf16-autocast+compile+fused-adamw")
    assert row.predicted_step_s == pytest.approx(0.58 * 0.8) and row.error_pct == pytest.approx(
        100 * (0.464 - 0.42) / 0.42
    )
    assert row.predicted_from_singles_step_s == pytest.approx(0.8 * 0.58)


def test_an_eager_float8_single_predicts_no_compiled_stack(tiny, monkeypatch):
    """float8's casts fuse only compiled: its eager single (slower than the baseline) would predict a compiled
    stack slower than its parent; the search says nothing rather than a figure it knows is wrong."""
    speed = {"baseline": 1.0, "compile": 0.6, "float8-frozen": 1.2, "compile+float8-frozen": 0.5}
    measured, result = _faked(tiny, monkeypatch, speed, ("compile", "float8-frozen"))
    rows = {r.stack: r for r in result.tables["search"]}
    assert measured[-1] == "compile+float8-frozen" and result.summary["search_best"] == ["compile+float8-frozen"]
    assert rows["compile+float8-frozen"].predicted_step_s is None
    assert rows["compile+float8-frozen"].predicted_from_singles_step_s is None


def _noisy_search(tiny, monkeypatch, runs: dict[str, list]):
    """The search with the processes of each stack faked in turn, each (step_s, spread_pct, timed steps, process
    wall[, numerics]) or a failed status (the last repeats); the rest at SPEED, steady: (the stacks measured in order,
    the carrier result)."""
    measured = []

    def fake_run(spec, timeout_s=0):
        name = spec.variant.name
        queue = runs.get(name, [(SPEED[name], 0.1, 5, 1.0)])
        run = queue[min(measured.count(name), len(queue) - 1)]
        measured.append(name)
        if isinstance(run, str):
            return Measurement(variant=spec.variant, status=run, process_wall_s=1.0)
        step_s, spread, steps, wall, record = (*run, WITHIN) if len(run) == 4 else run
        return Measurement(variant=spec.variant, step_s=step_s, mean_all_s=step_s, spread_pct=spread, steps=steps,
                           trustworthy=spread <= 2 and steps >= 3, numerics=record and dict(record),
                           process_wall_s=wall)  # fmt: skip

    def fake_baseline(spec, chosen, n):
        out = fake_run(dataclasses.replace(spec, variant=catalog.BASELINE_VARIANT))
        out.spread_across_pct, out.numerics = 0.5, {"losses": LOSSES, "rounded_away_pct": [0.0] * 3, "probe_loss": 2.0}
        return out

    monkeypatch.setattr(search.processes, "run", fake_run)
    monkeypatch.setattr(search.processes, "measure_baseline", fake_baseline)
    config = carrier.Config(checkpoint=(tiny,), **STEP, processes=1, numerics_steps=3, search=True,
                            variant=("bf16-autocast", "compile+fused-adamw"))  # fmt: skip
    return measured, carrier.run(config)


def test_a_noisy_row_is_measured_once_more_and_the_steadier_process_predicts(tiny, monkeypatch):
    """A single whose timed steps spread above 2% (one process put it 5% slow on an H100, adding ~5.5 points to a
    stack prediction's error): a second process, the steadier kept for the row, the carrier's table and the
    predictions; the two processes' disagreement keeps the row untrustworthy."""
    noisy = {"bf16-autocast": [(0.85, 4.9, 3, 1.0), (0.8, 0.5, 3, 1.0, ROUNDED_AWAY)]}
    measured, result = _noisy_search(tiny, monkeypatch, noisy)
    assert measured[:4] == ["baseline", "bf16-autocast", "bf16-autocast", "compile+fused-adamw"]
    rows = {r.stack: r for r in result.tables["search"]}
    assert rows["bf16-autocast"].measured_step_s == 0.8 and rows["bf16-autocast"].remeasured == (
        "measured twice, the first's steps spread above 2%: 0.8500 s at a 4.90% spread; then 0.8000 s at a 0.50% "
        "spread; the second kept"
    )
    assert rows["bf16-autocast"].within_tolerance is False  # the kept process's numerics, not the first's
    assert rows["compile+fused-adamw"].remeasured == ""
    [row] = [r for r in result.tables["carriers"] if r.variant == "bf16-autocast"]
    assert (row.step_s, row.trustworthy) == (0.8, False)  # the kept process's step; the two disagree by 6%
    assert row.spread_across_pct == pytest.approx(100 * 0.05 / 0.825)
    [advice] = [line for line in result.summary["advice"] if f"{tiny.name} bf16-autocast:" in line]
    assert "NOT TRUSTWORTHY" in advice


def test_two_processes_that_agree_make_a_trustworthy_row_and_predict_from_the_steadier(tiny, monkeypatch):
    noisy = {"bf16-autocast": [(0.805, 4.9, 3, 1.0), (0.8, 0.5, 3, 1.0)]}
    measured, result = _noisy_search(tiny, monkeypatch, noisy)
    rows = {r.stack: r for r in result.tables["search"]}
    assert rows["bf16-autocast+compile+fused-adamw"].predicted_from_singles_step_s == pytest.approx(0.8 * 0.58)
    [row] = [r for r in result.tables["carriers"] if r.variant == "bf16-autocast"]
    assert (row.step_s, row.trustworthy) == (0.8, True)


@pytest.mark.parametrize(
    ("runs", "times", "said"),
    [
        ([(0.85, 4.9, 3, 1.0), (0.8, 6.0, 3, 1.0)], 2, "then 0.8000 s at a 6.00% spread; the first kept"),
        ([(0.85, 4.9, 3, 1.0), (0.8, 0.5, 3, 1.0, None)], 2, "then 0.8000 s at a 0.50% spread; the first kept"),
        ([(0.85, 4.9, 3, 1.0), "failed: exit 1"], 2, "then failed: exit 1; the first kept"),
        ([(0.85, 9.0, 2, 1.0)], 1, ""),
        ([(0.85, 2.0, 5, 1.0)], 1, ""),
        ([(0.85, 4.9, 3, 5000.0)], 1, ""),
    ],
    ids=["second-noisier", "second-without-numerics", "second-failed", "two-steps", "at-the-limit", "no-budget"],
)
def test_a_second_process_only_where_it_can_tell_and_fits(tiny, monkeypatch, runs, times, said):
    measured, result = _noisy_search(tiny, monkeypatch, {"bf16-autocast": runs})
    assert measured.count("bf16-autocast") == times
    row = next(r for r in result.tables["search"] if r.stack == "bf16-autocast")
    assert row.measured_step_s == 0.85 and row.remeasured.endswith(said) and bool(row.remeasured) is bool(said)
    [kept] = [r for r in result.tables["carriers"] if r.variant == "bf16-autocast"]
    timed_twice = times == 2 and not isinstance(runs[1], str)  # a failed second process has no median to compare
    assert (kept.spread_across_pct is not None) is timed_twice


def test_the_second_process_comes_out_of_the_budget(tiny, monkeypatch):
    """A long second process leaves no room for the next candidate: listed as not tried."""
    measured, result = _noisy_search(tiny, monkeypatch, {"bf16-autocast": [(0.85, 4.9, 3, 1.0), (0.8, 0.5, 3, 8000.0)]})
    assert "compile+fused-adamw" not in measured and result.summary["not_tried"] == ["compile+fused-adamw"]


def test_the_second_process_is_priced_at_the_first_ones_wall(tiny, monkeypatch):
    """A compiled stack's process outlasts the search's mean: its second one is priced at its own first's wall."""
    measured, _ = _noisy_search(tiny, monkeypatch, {"compile+fused-adamw": [(0.58, 4.9, 3, 4000.0)]})
    assert measured.count("compile+fused-adamw") == 1  # 4,000 s would pass the 3,600 s budget; the mean, 2,000 s, not
