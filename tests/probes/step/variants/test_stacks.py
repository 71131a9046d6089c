"""Stacks of variants, the greedy search and the numerics price, on a tiny model in fresh processes: a
stack measured under its canonical name, an incompatible one refused in one line, a library variant
whose library is missing not applicable, and a deliberately broken variant caught by the numerics."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from probes.carrier import probe as carrier
from probes.result import FieldError
from probes.step.variants import catalog, numerics, search, settings, stacks
from probes.step.variants.measurement import Measurement
from runner.cli import main

STEP = dict(weights="random", lora_rank=4, seq_len=16, batch_size=2, warmup_steps=1, steps=2, max_steps=2, device="cpu")


@pytest.fixture(scope="module")
def stacked(tiny, tmp_path_factory):
    import sys

    from tests.probes.conftest import DATA

    sys.path.insert(0, str(DATA))  # the lab's variants module, importable here and in the workers
    try:
        yield carrier.run(
            carrier.Config(
                checkpoint=(tiny,),
                **STEP,
                processes=1,
                numerics_steps=6,
                variant=(
                    "fused-adamw+bf16-adapters",
                    "bf16-autocast",
                    "variants_lab:ZERO_GRAD",
                    "variants_lab:ZERO_A",
                    "liger",
                ),
            )
        )
    finally:
        sys.path.remove(str(DATA))


def test_a_stack_is_measured_in_its_own_process_under_its_canonical_name(stacked):
    rows = {r.variant: r for r in stacked.tables["carriers"]}
    assert list(rows) == [
        "baseline",
        "bf16-adapters+fused-adamw",
        "bf16-autocast",
        "variants_lab:ZERO_GRAD",
        "variants_lab:ZERO_A",
        "liger",
    ]
    stack = rows["bf16-adapters+fused-adamw"]
    assert stack.step_s > 0 and stack.status.startswith(("ok", "not trustworthy"))  # a loaded CPU
    assert stack.caveat.startswith("bf16-adapters: optimizer precision") and "| fused-adamw: " in stack.caveat


def test_a_library_variant_without_its_library_is_not_applicable_not_a_failure(stacked):
    pytest.importorskip("torch")
    liger = next(r for r in stacked.tables["carriers"] if r.variant == "liger")
    assert liger.status == "not applicable: install liger-kernel" and liger.step_s is None
    assert {c.name: c for c in stacked.checks}["all_measured"].ok


def test_the_numerics_price_is_measured_and_a_broken_variant_is_out_of_tolerance(stacked):
    rows = {r.variant: r for r in stacked.tables["numerics"]}
    assert rows["baseline"].within_tolerance and rows["baseline"].steps == 6
    # bf16-autocast is what the reference harness does already: the same numbers, exactly
    same = rows["bf16-autocast"]
    assert same.grad_cosine == pytest.approx(1.0) and same.loss_first_diff_pct == 0 and same.within_tolerance
    broken = rows["variants_lab:ZERO_GRAD"]
    assert broken.grad_cosine < 0.99 and broken.grad_norm_ratio < 0.95
    assert broken.within_tolerance is False and "gradient cosine" in broken.basis
    # at build every LoRA B is zero, so A's gradients are too: only the probe from non-zero B sees this one
    frozen_a = rows["variants_lab:ZERO_A"]
    assert frozen_a.grad_cosine < 0.99 and frozen_a.within_tolerance is False
    assert frozen_a.grad_worst.startswith("layers.") and frozen_a.grad_worst.endswith(".lora_A")
    assert f"gradient cosine 0 ({frozen_a.grad_worst})" in frozen_a.basis
    stack = rows["bf16-adapters+fused-adamw"]
    assert (
        stack.grad_cosine is not None and stack.rounded_away_pct is not None and stack.loss_curve_diff_pct is not None
    )
    assert rows["liger"].within_tolerance is None and rows["liger"].basis.startswith("not measured: not applicable")
    (line,) = [a for a in stacked.summary["advice"] if " variants_lab:ZERO_GRAD:" in a]
    assert "NUMERICS OUTSIDE TOLERANCE" in line and "gradient cosine" in line


def test_gradients_compare_name_by_name_whatever_the_optimizers_group_order(tiny, lab_path):
    """The harness's AdamW holds B's group before A's; fused-adamw keeps its groups, betas and eps, so it
    trains the same: the gradients agree (compared by name) and the curves match."""
    result = carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            **STEP,
            processes=1,
            numerics_steps=4,
            harness="harness_groups",
            variant=("fused-adamw",),
        )
    )
    fused = {r.variant: r for r in result.tables["numerics"]}["fused-adamw"]
    assert fused.grad_cosine == pytest.approx(1.0, abs=1e-6) and fused.grad_norm_ratio == pytest.approx(1.0, abs=1e-6)
    assert fused.loss_curve_diff_pct < 0.1 and fused.within_tolerance


def test_gradient_agreement_is_by_name_tensor_by_tensor_and_refuses_other_parameters():
    a, b = torch.arange(1.0, 4.0), torch.tensor([2.0, -1.0])
    same = numerics.agreement({"x": a, "y": b}, {"y": b, "x": a})  # another order, the same gradients
    assert same["grad_cosine"] == pytest.approx(1.0) and same["grad_norm_ratio"] == pytest.approx(1.0)
    # y's gradient lost: over everything the cosine is still 0.86; tensor by tensor it is 0, at y
    lost = numerics.agreement({"x": a, "y": b}, {"x": a, "y": torch.zeros(2)})
    assert lost["grad_cosine"] == 0.0 and lost["grad_worst"] == "y"
    assert lost["grad_norm_ratio"] == pytest.approx((14 / 19) ** 0.5)
    assert numerics.agreement({"x": a}, {"z": a}) == {
        "grad_note": "not comparable: 2 adapter parameters differ from the baseline's"
    }


def test_fused_adamw_keeps_the_harness_groups_and_refuses_another_optimizer():
    p, q = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    contract = catalog.get("fused-adamw").contract(
        dataclasses.replace(
            carrier_contract(),
            make_optimizer=lambda ps: torch.optim.AdamW(
                [{"params": [ps[0]], "lr": 2e-4}, {"params": [ps[1]], "lr": 8e-4}], betas=(0.9, 0.95), eps=1e-6
            ),
        )
    )
    groups = contract.make_optimizer([p, q]).param_groups
    assert [(g["lr"], g["betas"], g["eps"], g["fused"]) for g in groups] == [
        (2e-4, (0.9, 0.95), 1e-6, True),
        (8e-4, (0.9, 0.95), 1e-6, True),
    ]
    sgd = catalog.get("fused-adamw").contract(
        dataclasses.replace(carrier_contract(), make_optimizer=lambda ps: torch.optim.SGD(ps, lr=0.1))
    )
    with pytest.raises(catalog.NotApplicable, match="the harness's optimizer is SGD"):
        sgd.make_optimizer([p])


def carrier_contract():
    from probes.step import harness as reference
    from probes.step.train import contract

    return contract.resolve(reference)


def test_the_fastest_is_printed_as_settings_and_the_command_reproducing_it(stacked):
    lines = stacked.summary["settings"]
    assert lines[0].startswith(f"{stacked.tables['carriers'][0].model}: fastest ")
    command = lines[-2].strip()
    assert command.startswith("reproduce: labprobe probe carrier --checkpoint ")
    for flag in ("--lora-rank 4", "--device cpu", "--warmup-steps 1", "--steps 2", "--max-steps 2", "--processes 1"):
        assert f" {flag} " in command  # what the measured step was, where it is not the default
    assert "--seed" not in command and "--lora-alpha" not in command  # defaults stay off the line
    assert lines[-1].startswith("fastest within the numerics tolerance: ") and "ZERO_GRAD" not in lines[-1]
    assert settings.lines("bf16-adapters+compile+fused-adamw") == [
        *settings.SETTINGS["bf16-adapters"],
        *settings.SETTINGS["compile"],
        *settings.SETTINGS["fused-adamw"],
    ]
    assert any("autocast_adapter_dtype=False" in s for s in settings.SETTINGS["bf16-adapters"])
    assert any('optim="adamw_torch_fused"' in s for s in settings.SETTINGS["fused-adamw"])


def test_an_incompatible_stack_is_one_line_naming_the_conflict_exit_2(tiny, capsys):
    code = main(
        ["probe", "carrier", "--checkpoint", str(tiny), "--weights", "random", "--device", "cpu"]
        + ["--variant", "compile+bf16-autocast+bf16-adapters"]
    )
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "bf16-adapters and bf16-autocast conflict: both set the adapter dtype (bfloat16 vs float32)" in err


def test_stack_names_are_canonical_and_members_compose():
    parsed = stacks.parse(("fused-adamw+compile", "compile+fused-adamw", "baseline"))
    assert [v.name for v in parsed] == ["baseline", "compile+fused-adamw"]
    assert parsed[1].compile and parsed[1].fused_adamw and parsed[1] == stacks.get("compile+fused-adamw")
    stack = stacks.get("fused-adamw+grad-ckpt+ce-chunk=64")
    assert stack.name == "ce-chunk=64+fused-adamw+grad-ckpt"
    assert stack.fused_adamw and stack.gradient_checkpointing and stack.ce_chunk == 64
    assert stacks.compatible(catalog.get("bf16-autocast"), catalog.get("compile")) is None
    assert "conflict" in stacks.compatible(catalog.get("ce-chunk=8"), catalog.get("ce-chunk=16"))
    assert stacks.add(stacks.get("grad-ckpt+fused-adamw"), catalog.get("ce-chunk=64")) == stack
    with pytest.raises(FieldError, match="baseline is no change"):
        stacks.get("baseline+compile")
    # one stack, one name: blanks, order, a chunk's leading zeros and repeats make no second one
    assert stacks.get(" compile").name == "compile" and stacks.get("ce-chunk=0512").name == "ce-chunk=512"
    assert stacks.get("ce-chunk=0+ce-chunk=00").name == "ce-chunk=0"
    for odd in ("ce-chunk=\u0661\u0662", "ce-chunk=" + "1" * 5000):  # Arabic-Indic digits; more than int() reads
        with pytest.raises(FieldError, match="unknown"):
            stacks.get(odd)
    asked = ("fused-adamw + compile", " ce-chunk=0512", "compile+fused-adamw", "baseline")
    config = carrier.Config(checkpoint=(Path("c"),), variant=asked)
    assert config.variant == ("compile+fused-adamw", "ce-chunk=512", "baseline")  # what the store and a sweep hash
    with pytest.raises(FieldError, match="search"):
        carrier.Config(checkpoint=(Path("c"),), search=True, steps=0)
    from runner.lab.probe_config import build_probe_config

    replay = build_probe_config("replay", {"variant": "fused-adamw + compile"}, placeholders=True, corpus="c.jsonl")
    terms = {
        "linear_s": 1e-4,
        "quadratic_s": 0,
        "fixed_s": 0.1,
        "stack_json": "c.json",
        "stack": " compile+fused-adamw",
    }
    goodput = build_probe_config("goodput", terms, placeholders=True, corpus="c.jsonl")
    assert replay.variant == goodput.stack == "compile+fused-adamw"


def test_the_search_grows_the_best_stack_predicting_each_before_measuring(tiny):
    result = carrier.run(
        carrier.Config(
            checkpoint=(tiny,),
            **STEP,
            processes=2,
            numerics_steps=3,
            search=True,
            variant=("bf16-adapters", "fused-adamw", "ce-chunk=8"),
        )
    )
    rows = result.tables["search"]
    singles = [r for r in rows if r.round == 1]
    assert [r.stack for r in singles] == ["bf16-adapters", "fused-adamw", "ce-chunk=8"]
    assert all(r.parent == "baseline" and r.predicted_from_singles_step_s is None for r in singles)
    attributed = [r for r in singles if r.predicted_attribution_step_s is not None]
    assert attributed, "no single predicted from the attribution"
    for r in attributed:
        error = 100 * (r.predicted_attribution_step_s - r.measured_step_s) / r.measured_step_s
        assert r.error_attribution_pct == pytest.approx(error)
    later = [r for r in rows if r.round > 1]
    for r in later:  # predicted from the singles before measured, the error after
        assert r.predicted_step_s is not None and r.measured_step_s is not None
        assert r.error_pct == pytest.approx(100 * (r.predicted_step_s - r.measured_step_s) / r.measured_step_s)
        assert "+" in r.stack and r.stack == stacks.canonical(r.stack)
    chosen = [r.stack for r in rows if r.chosen]
    assert all(stacks.members(a) == stacks.members(b)[: len(stacks.members(a))] or set(stacks.members(a)) <= set(
        stacks.members(b)) for a, b in zip(chosen, chosen[1:]))  # fmt: skip
    assert result.summary["search_stop"] and len(result.summary["search_best"]) == 1
    best = result.summary["search_best"][0]
    assert result.summary["settings"][0].startswith(f"{rows[0].model}: the search's best {best}")
    measured = {r.variant for r in result.tables["carriers"]}
    assert {r.stack for r in rows} <= measured and {r.variant for r in result.tables["numerics"]} == measured


def _faked_search(tiny, monkeypatch, speed: dict[str, float], candidates: tuple[str, ...]):
    """The search over `candidates` with every process faked at its `speed` step time: (names measured, result)."""
    measured = []

    def fake_run(spec, timeout_s=0):
        measured.append(spec.variant.name)
        step_s = speed[spec.variant.name]
        return Measurement(variant=spec.variant, step_s=step_s, mean_all_s=step_s, spread_pct=0.1, trustworthy=True)

    def fake_baseline(spec, chosen, n):
        out = fake_run(dataclasses.replace(spec, variant=catalog.BASELINE_VARIANT))
        out.spread_across_pct, out.processes = 0.5, n
        return out

    monkeypatch.setattr(search.processes, "run", fake_run)
    monkeypatch.setattr(search.processes, "measure_baseline", fake_baseline)
    config = carrier.Config(checkpoint=(tiny,), **STEP, processes=2, numerics_steps=0, search=True, variant=candidates)
    result = carrier.run(config)
    carriers = [r.variant for r in result.tables["carriers"]]
    assert len(measured) == len(set(measured)) and len(carriers) == len(set(carriers)), measured
    return measured, result


def test_the_search_never_measures_a_stack_twice_whatever_the_candidates(tiny, monkeypatch):
    """A candidate may be a stack: beside a current stack holding its members it adds nothing, and a stack
    measured in an earlier round is not measured again (goodput refuses a file with a variant twice)."""
    speed = {"baseline": 1.0, "compile": 0.5, "fused-adamw": 0.9, "compile+fused-adamw": 0.45, "ce-chunk=8": 0.95}
    speed["ce-chunk=8+compile+fused-adamw"] = 0.44
    candidates = ("compile", "fused-adamw", "compile+fused-adamw", "ce-chunk=8")
    measured, result = _faked_search(tiny, monkeypatch, speed, candidates)
    grown = ["compile+fused-adamw", "ce-chunk=8", "ce-chunk=8+compile+fused-adamw"]
    assert sorted(measured) == sorted(["baseline", "compile", "fused-adamw", *grown])
    assert result.summary["search_best"] == ["ce-chunk=8+compile+fused-adamw"]
    # compile alone wins round 1: its addition of fused-adamw is the stack candidate measured then, not again
    speed = {"baseline": 1.0, "compile": 0.5, "fused-adamw": 0.9, "compile+fused-adamw": 0.6}
    measured, result = _faked_search(tiny, monkeypatch, speed, candidates[:3])
    assert sorted(measured) == sorted(speed) and result.summary["search_best"] == ["compile"]


def test_the_search_budget_says_what_was_not_tried(tiny):
    result = carrier.run(
        carrier.Config(checkpoint=(tiny,), **STEP, processes=1, numerics_steps=0, search=True, search_budget_s=0.5)
    )
    assert result.summary["not_tried"] == [v.name for v in search.CANDIDATES]
    assert result.summary["search_stop"] == ["budget spent"]
    assert [r.variant for r in result.tables["carriers"]] == ["baseline"]


def test_tolerances_name_what_a_row_breaks():
    record = {"losses": [2.0, 1.5, 1.0], "rounded_away_pct": [0.0, 0.0, 0.0]}
    base = Measurement(variant=catalog.BASELINE_VARIANT, numerics=record)
    v = catalog.get("fused-adamw")
    fine = Measurement(variant=v, numerics={**record, "grad_cosine": 0.999, "grad_norm_ratio": 1.01})
    assert numerics.compare("m", base, fine).within_tolerance
    drift = Measurement(variant=v, numerics={"losses": [2.0, 1.8, 1.4], "rounded_away_pct": [0.5, 3.0, 5.0],
                                             "grad_cosine": 0.999, "grad_norm_ratio": 1.0})  # fmt: skip
    row = numerics.compare("m", base, drift)
    assert row.loss_curve_diff_pct == pytest.approx(100 * 0.4 / 1.0) and row.rounded_away_pct == 5.0
    assert not row.within_tolerance and "loss curve 40" in row.basis and "updates rounded away 5" in row.basis


def test_advice_calls_a_change_noise_by_its_step_time_as_the_noise_is_measured():
    from probes.step.variants import whatif

    base = Measurement(variant=catalog.get("baseline"), step_s=1.0, caveat="")
    faster = Measurement(variant=catalog.get("compile"), step_s=0.6, caveat="")  # x1.667 tok/s, 40% off the step
    (within,) = whatif.advice("m", base, [faster], noise_pct=50.0, tokens=100)
    (beyond,) = whatif.advice("m", base, [faster], noise_pct=35.0, tokens=100)
    assert "within the baseline's 50.0%" in within and "within" not in beyond


def test_two_lab_changes_stack_into_one_making_both_in_member_order(lab_path):
    import variants_lab

    stack = stacks.get("variants_lab:ZERO_A+variants_lab:ZERO_GRAD")
    assert stack.name == "variants_lab:ZERO_A+variants_lab:ZERO_GRAD"
    assert stack.prepare == stacks.Prepares((variants_lab._zero_lora_a, variants_lab._zero_first_layer))
    assert stack == stacks.get("variants_lab:ZERO_GRAD+variants_lab:ZERO_A")


def test_advice_marks_a_speedup_read_from_untrustworthy_timings():
    from probes.step.variants import whatif

    base = Measurement(variant=catalog.get("baseline"), step_s=1.0, caveat="", trustworthy=True)
    noisy = Measurement(variant=catalog.get("compile"), step_s=0.5, caveat="", trustworthy=False)
    (line,) = whatif.advice("m", base, [noisy], noise_pct=None, tokens=100)
    assert "(NOT TRUSTWORTHY: compile spread above 2%)" in line
    failed = dataclasses.replace(base, status="failed: exit 1")
    assert whatif.predict(catalog.get("compile"), failed) == (
        None,
        "not predicted: the baseline was not measured (failed: exit 1)",
    )


def test_the_reproducing_command_pastes_into_a_shell_as_one_argument_each(tmp_path):
    """A checkpoint path with a space or `$(...)` was printed bare: pasted, it split or ran the command."""
    import shlex

    from probes.carrier.config import Config

    ckpt = tmp_path / "run $(touch pwned) `id`"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    line = settings.command("bf16-adapters+compile", str(ckpt), Config(checkpoint=(ckpt,), device="cpu"))
    words = shlex.split(line)
    assert words[words.index("--checkpoint") + 1] == str(ckpt)
    assert words[words.index("--variant") + 1] == "bf16-adapters+compile"
    assert words[words.index("--device") + 1] == "cpu"
