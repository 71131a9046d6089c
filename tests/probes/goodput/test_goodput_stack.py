"""goodput priced with a stack (--stack-json, --stack): every step time scaled by the stack's measured step over
the baseline's, the hours of the best batching and the best stack said, and bad inputs one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lengths_util import write_lengths
from stack_util import carrier_json

from probes.goodput import probe as goodput
from probes.result import InputError
from runner.cli import main

STEPS = {"baseline": 0.40, "bf16-adapters": 0.30, "bf16-adapters+compile+fused-adamw": 0.20, "liger": None}


def _goodput_argv(lengths: Path) -> list[str]:
    """goodput over `lengths` with a linear step model given on the command line."""
    return [
        "probe",
        "goodput",
        "--lengths",
        str(lengths),
        "--linear-s",
        "1e-4",
        "--quadratic-s",
        "0",
        "--fixed-s",
        "0.1",
    ]


@pytest.fixture
def lengths(tmp_path):
    return write_lengths(tmp_path / "l.parquet", [100, 900, 300, 2000, 50, 700, 1200, 400] * 12)


def _config(lengths, **kw) -> goodput.Config:
    terms = dict(quadratic_s=1e-8, linear_s=2e-5, fixed_s=0.05, floor_s=0.06, fit_min_len=256, fit_max_len=2048)
    return goodput.Config(lengths=lengths, batch_size=4, max_length=2048, token_budget=5_000_000, **terms, **kw)


def test_a_faster_stack_prices_fewer_hours_by_its_measured_factor(lengths, tmp_path):
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS)
    plain = goodput.run(_config(lengths))
    # asked in another order than carrier stores it: the same stack
    stacked = goodput.run(_config(lengths, stack_json=stack_file, stack="fused-adamw+compile+bf16-adapters"))
    by_strategy = {r.strategy: r for r in plain.tables["goodput"]}
    for row in stacked.tables["goodput"]:
        base = by_strategy[row.strategy]
        assert row.epoch_s == pytest.approx(base.epoch_s * 0.5) and row.hours_per_job < base.hours_per_job
        assert row.hours_per_job == pytest.approx(base.hours_per_job * 0.5)  # no one-off shape cost here
    s = stacked.summary
    best = min(plain.tables["goodput"], key=lambda r: r.epoch_s)
    assert s["priced_with"] == f"{best.strategy} batching, stack bf16-adapters+compile+fused-adamw"
    assert s["stack_step_factor"] == pytest.approx(0.5) and s["baseline_hours_per_job"] == best.hours_per_job
    assert s["best_hours_per_job"] == pytest.approx(0.5 * best.hours_per_job) and s["stack_within_tolerance"]
    assert "x0.5000" in s["step_model"] and {c.name: c.ok for c in stacked.checks}["stack_trustworthy"]
    assert plain.summary["priced_with"] == f"{best.strategy} batching, the harness as it is"
    assert plain.summary["stack"] is None and "stack_trustworthy" not in {c.name for c in plain.checks}


def test_without_a_stack_named_the_fastest_ok_row_prices_and_a_slower_one_prices_more(lengths, tmp_path):
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS | {"grad-ckpt": 0.52})
    fastest = goodput.run(_config(lengths, stack_json=stack_file))
    assert fastest.summary["stack"] == "bf16-adapters+compile+fused-adamw"  # not liger: it did not measure
    slower = goodput.run(_config(lengths, stack_json=stack_file, stack="grad-ckpt"))
    assert slower.summary["best_hours_per_job"] > slower.summary["baseline_hours_per_job"]
    assert slower.summary["stack_step_factor"] == pytest.approx(1.3)


def test_a_stack_whose_numerics_did_not_run_is_not_taken_for_one_within_tolerance(lengths, tmp_path):
    """Its numerics ran out of memory after its timing: the file has the others' verdicts and none for it."""
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS | {"fused-adamw": 0.39})
    doc = json.loads(stack_file.read_text())
    for row in doc["tables"]["numerics"]:
        if row["variant"] == "bf16-adapters+compile+fused-adamw":
            row.update(within_tolerance=None, basis="not measured: oom: CUDA out of memory.")
    stack_file.write_text(json.dumps(doc))
    assert goodput.run(_config(lengths, stack_json=stack_file)).summary["stack"] == "fused-adamw"
    named = goodput.run(_config(lengths, stack_json=stack_file, stack="bf16-adapters+compile+fused-adamw"))
    check = {c.name: c for c in named.checks}["stack_numerics_within_tolerance"]
    assert not check.ok and "not measured" in check.detail and "says why" in check.detail
    for row in doc["tables"]["numerics"]:  # the baseline's numerics ran out of memory too: none has a verdict
        row.update(within_tolerance=None)
    stack_file.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="no row's numerics ran .*; name one with --stack"):
        goodput.run(_config(lengths, stack_json=stack_file))


def test_a_profiles_variants_table_serves_and_an_untrustworthy_row_fails_its_check(lengths, tmp_path):
    rows = [
        {"variant": "baseline", "tokens": 4096, "step_s": 0.4, "trustworthy": False, "status": "ok"},
        {"variant": "compile", "tokens": 4096, "step_s": 0.3, "trustworthy": True, "status": "ok"},
    ]
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"config": {"checkpoint": "/m/qwen3-4b-base"}, "tables": {"variants": rows}}))
    result = goodput.run(_config(lengths, stack_json=profile, stack="compile"))
    assert (
        result.summary["stack_step_factor"] == pytest.approx(0.75) and result.summary["stack_model"] == "qwen3-4b-base"
    )
    checks = {c.name: c for c in result.checks}
    assert not checks["stack_trustworthy"].ok and "not trustworthy" in checks["stack_trustworthy"].detail
    assert checks["stack_numerics_within_tolerance"].ok  # not measured: said, not failed
    assert "numerics not measured" in checks["stack_numerics_within_tolerance"].detail
    # a profile given its checkpoint as the config.json: the model is still the folder (carrier's name for it)
    profile.write_text(
        json.dumps({"config": {"checkpoint": "/m/qwen3-4b-base/config.json"}, "tables": {"variants": rows}})
    )
    assert goodput.run(_config(lengths, stack_json=profile, stack="compile")).summary["stack_model"] == "qwen3-4b-base"


def test_bad_stack_inputs_are_one_line_exit_2(lengths, tmp_path, capsys):
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS)
    (tmp_path / "empty.json").write_text("\n")
    (tmp_path / "latin1.json").write_bytes(b'{"tables": "caf\xe9"}')
    base = _goodput_argv(lengths)
    cases = [
        (["--stack-json", str(tmp_path / "missing.json")], "missing.json: unreadable carrier/profile JSON"),
        (
            ["--stack-json", str(tmp_path / "empty.json")],
            "empty.json: unreadable carrier/profile JSON: the file is empty",
        ),
        (
            ["--stack-json", str(tmp_path / "latin1.json")],
            "latin1.json: unreadable carrier/profile JSON: 'utf-8' codec",
        ),
        (["--stack-json", str(stack_file), "--stack", "compile"], "no row for 'compile' (measured: baseline, bf16"),
        (["--stack-json", str(stack_file), "--stack", "liger"], "'liger' has no measured step_s (status: not appl"),
        (["--stack", "compile"], "--stack needs --stack-json"),
        (
            ["--stack-json", str(stack_file), "--stack", "compile++fused-adamw"],
            "--stack 'compile++fused-adamw': an empty",
        ),
        (
            ["--stack-json", str(stack_file), "--stack", "baseline+compile"],
            "--stack 'baseline+compile': baseline is no",
        ),
    ]
    for extra, needle in cases:
        assert main(base + extra) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    (tmp_path / "other.json").write_text(json.dumps({"tables": {"goodput": []}}))
    assert main(base + ["--stack-json", str(tmp_path / "other.json")]) == 2
    assert "no stack measured" in capsys.readouterr().err
    two = carrier_json(tmp_path / "two.json", "a", STEPS)
    doc = json.loads(two.read_text())
    doc["tables"]["carriers"] += [{**r, "model": "b"} for r in doc["tables"]["carriers"]]
    two.write_text(json.dumps(doc))
    assert main(base + ["--stack-json", str(two)]) == 2
    assert (
        "rows of 2 models (a, b), and no checkpoint named to choose one by (--checkpoint: " in capsys.readouterr().err
    )


def test_a_stack_file_whose_rows_do_not_price_is_one_line_exit_2(lengths, tmp_path, capsys):
    """A step_s that is no positive finite number, a row that failed yet kept a step_s, two rows of one variant
    (runs pasted together), a table that is no list of rows: each refused naming the file and the row."""
    base = _goodput_argv(lengths)

    def edited(name: str, edit) -> Path:
        path = carrier_json(tmp_path / name, "qwen3-4b-base", STEPS)
        doc = json.loads(path.read_text())
        edit(doc["tables"])
        path.write_text(json.dumps(doc))  # NaN and Infinity as Python's json writes them
        return path

    def step(variant: str, value, status: str = "ok"):
        def edit(tables):
            (row,) = [r for r in tables["carriers"] if r["variant"] == variant]
            row.update(step_s=value, status=status)

        return edit

    cases = [
        (step("bf16-adapters", float("nan")), "'bf16-adapters' has no measured step_s (status: ok, step_s: nan)"),
        (step("bf16-adapters", float("inf")), "'bf16-adapters' has no measured step_s (status: ok, step_s: inf)"),
        (step("bf16-adapters", True), "'bf16-adapters' has no measured step_s (status: ok, step_s: True)"),
        (step("bf16-adapters", 0), "'bf16-adapters' has no measured step_s (status: ok, step_s: 0)"),
        (step("baseline", float("nan")), "'baseline' has no measured step_s (status: ok, step_s: nan)"),
        (step("baseline", -0.4), "'baseline' has no measured step_s (status: ok, step_s: -0.4)"),
        (step("baseline", 0.4, "failed: the process died"), "(status: failed: the process died, step_s: 0.4)"),
        (lambda t: t["carriers"].append(dict(t["carriers"][1])), "two rows of qwen3-4b-base, variant 'bf16-adapters'"),
        (
            step("bf16-adapters", 1e-300),
            "the step_s of 'bf16-adapters' is x2.5e-300 the baseline's (1e-300 s vs 0.4 s)",
        ),
        (step("baseline", 1e308), "the step_s of 'bf16-adapters' is x3e-309 the baseline's"),
        (lambda t: t.update(carriers={"baseline": 0.4}), "table 'carriers' is not a list of rows"),
        (lambda t: t["numerics"][1].update(within_tolerance="yes"), "bf16-adapters's within_tolerance is 'yes', not"),
    ]
    for i, (edit, needle) in enumerate(cases):
        path = edited(f"c{i}.json", edit)
        assert main(base + ["--stack-json", str(path), "--stack", "bf16-adapters"]) == 2, needle
        err = capsys.readouterr().err.strip()
        assert f"c{i}.json: " in err and needle in err and len(err.splitlines()) == 1, err
    # a factor is of one column: the baseline's mean over the stack's median would price how skewed the steps are
    path = edited("mixed.json", lambda t: t["carriers"][0].update(mean_step_s=0.42))
    assert goodput.run(_config(lengths, stack_json=path, stack="bf16-adapters")).summary[
        "stack_step_factor"
    ] == pytest.approx(0.75)
    # tokens_per_step only describes the shape: one that is no count is left out of the description, no traceback
    path = edited("tokens.json", lambda t: t["carriers"][1].update(tokens_per_step="4k"))
    summary = goodput.run(_config(lengths, stack_json=path, stack="bf16-adapters")).summary
    assert summary["stack_tokens_per_step"] is None and "tokens a step" not in summary["step_model"]
    # unset --stack: a NaN row is not the fastest, and bf16-adapters is outside the numerics tolerance (the
    # fixture's numerics): the baseline is the fastest left
    path = edited("nan.json", step("bf16-adapters+compile+fused-adamw", float("nan")))
    assert goodput.run(_config(lengths, stack_json=path)).summary["stack"] == "baseline"


def test_priced_with_names_the_bucket_size_that_priced_the_hours(lengths, tmp_path):
    """`bucket batching` alone does not say which batching: its size (given, or the bucket probe's pick) does."""
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS)
    for stack_json, stack in ((None, "the harness as it is"), (stack_file, "stack bf16-adapters")):
        kw = dict(stack_json=stack_json, stack="bf16-adapters") if stack_json else {}
        result = goodput.run(_config(lengths, strategies=("bucket",), bucket_size=8, **kw))
        assert result.summary["priced_with"] == f"bucket batching (bucket size 8), {stack}"


def test_the_factor_scales_the_steady_steps_and_the_new_shape_one_offs_stay(lengths, tmp_path):
    """README's recomputation: hours with the stack = (hours without - new_shapes_s/3600) x factor + new_shapes_s/3600."""
    stack_file = carrier_json(tmp_path / "carrier.json", "qwen3-4b-base", STEPS)
    plain = {r.strategy: r for r in goodput.run(_config(lengths, new_shape_s=0.3)).tables["goodput"]}
    stacked = goodput.run(_config(lengths, new_shape_s=0.3, stack_json=stack_file, stack="bf16-adapters"))
    for row in stacked.tables["goodput"]:
        base, once_h = plain[row.strategy], row.new_shapes_s / 3600
        assert row.new_shapes_s == base.new_shapes_s == pytest.approx(0.3 * row.num_shapes) and once_h > 0
        assert row.hours_per_job == pytest.approx((base.hours_per_job - once_h) * 0.75 + once_h)


def _profile(path: Path, checkpoint: str, **setup) -> Path:
    """A profile --json with a fit (and the checkpoint it measured, as profile's config holds it)."""
    fit = [{"term": t, "coef": c} for t, c in (("quadratic", 1e-8), ("linear", 2e-5), ("fixed", 0.05))]
    scaling = [
        {"seq_len": n, "batch_size": 4, "tokens": 4 * n, "in_fit": True, "launch_bound": False} for n in (256, 2048)
    ]
    config = {"checkpoint": checkpoint, **setup}
    path.write_text(json.dumps({"config": config, "tables": {"fit": fit, "scaling": scaling}}))
    return path


def test_a_stack_of_another_model_than_the_fits_fails_its_check_and_the_fits_model_picks_among_several(
    lengths, tmp_path
):
    kw = dict(lengths=lengths, batch_size=4, max_length=2048, token_budget=5_000_000)
    four_b = carrier_json(tmp_path / "4b.json", "qwen3-4b-base", STEPS)
    other = goodput.run(
        goodput.Config(profile=_profile(tmp_path / "p.json", "/m/qwen3-1.7b-base"), stack_json=four_b, **kw)
    )
    check = {c.name: c for c in other.checks}["stack_of_the_fits_model"]
    assert not check.ok and "measured on qwen3-4b-base, the fit on qwen3-1.7b-base" in check.detail
    same = goodput.run(
        goodput.Config(profile=_profile(tmp_path / "p.json", "/m/qwen3-4b-base"), stack_json=four_b, **kw)
    )
    assert {c.name: c.ok for c in same.checks}["stack_of_the_fits_model"]
    both = json.loads(four_b.read_text())  # and the 1.7B's rows, its stack x0.5 where the 4B's is x0.75
    steps = {"baseline": 0.8, "bf16-adapters": 0.4}
    both["tables"]["carriers"] += [
        {**r, "model": "qwen3-1.7b-base", "step_s": steps[r["variant"]]}
        for r in both["tables"]["carriers"]
        if r["variant"] in steps
    ]
    (tmp_path / "both.json").write_text(json.dumps(both))
    profile = _profile(tmp_path / "p.json", "/m/qwen3-1.7b-base")
    picked = goodput.run(
        goodput.Config(profile=profile, stack_json=tmp_path / "both.json", stack="bf16-adapters", **kw)
    )
    assert picked.summary["stack_model"] == "qwen3-1.7b-base" and picked.summary["stack_step_factor"] == 0.5


def test_a_stack_measured_through_another_harness_rank_or_chunk_fails_its_check(lengths, tmp_path):
    """A stack's saving through one harness is no price of a fit through another (a fused loss saves nothing
    where the harness already chunks it): the check names each difference; what one file lacks is not compared."""
    kw = dict(lengths=lengths, batch_size=4, max_length=2048, token_budget=5_000_000)
    plain = {"harness": "benchmarks.harness_plain", "lora_rank": 32, "ce_chunk": 1024}
    stack = carrier_json(tmp_path / "s.json", "qwen3-4b-base", STEPS, setup=plain)

    def check(**setup):
        profile = _profile(tmp_path / "p.json", "/m/qwen3-4b-base", **setup)
        return {c.name: c for c in goodput.run(goodput.Config(profile=profile, stack_json=stack, **kw)).checks}[
            "stack_of_the_fits_step"
        ]

    other = check(harness="probes.step.harness", lora_rank=16, ce_chunk=1024)
    assert not other.ok and other.detail == (
        "the stack and the fit measured through another step (stack vs fit): harness 'benchmarks.harness_plain' "
        "vs 'probes.step.harness'; lora_rank 32 vs 16"
    )
    same = check(**plain)
    assert same.ok and same.detail.endswith("the same harness, lora_rank, ce_chunk")
    older = check()  # a profile that names none of them
    assert older.ok and older.detail.startswith("no harness, LoRA rank or CE chunk named by both (the stack names")
    assert check(ce_chunk=4096).detail.endswith("ce_chunk 1024 vs 4096")
    # on another card: the price and its replay must come from one
    h200 = json.loads(stack.read_text()) | {"summary": {"device": "NVIDIA H200"}}
    (tmp_path / "h200.json").write_text(json.dumps(h200))
    profile = _profile(tmp_path / "p.json", "/m/qwen3-4b-base", **plain)
    profile.write_text(json.dumps(json.loads(profile.read_text()) | {"summary": {"device": "NVIDIA H100 80GB HBM3"}}))
    run = goodput.run(goodput.Config(profile=profile, stack_json=tmp_path / "h200.json", **kw))
    card = {c.name: c for c in run.checks}["stack_of_the_fits_step"]
    assert not card.ok and card.detail.endswith("card 'NVIDIA H200' vs 'NVIDIA H100 80GB HBM3'")

    from probes.step.steptime import stack_step
    from probes.step.steptime.model import setup_of

    assert stack_step.setup_differences({"lora_rank": 1}, {"lora_rank": True}) == ["lora_rank 1 vs True"]
    assert stack_step.setup_differences({"lora_rank": 32}, {"lora_rank": 32.0}) == []  # a store's float
    # files from before probes/ became packages name the reference harness where it lived then
    old = setup_of({"harness": "probes.harness", "lora_rank": 32})
    assert stack_step.setup_differences(old, setup_of({"harness": "probes.step.harness"})) == []


def test_a_stack_measured_at_another_shape_says_so(lengths, tmp_path):
    """The factor is the stack's saving at the shape it was measured at, full unmasked rows; the check passes
    only when the best strategy spends most of its priced time in such batches. Packed rows are masked
    (positions restart): on an H100 the stack saved x0.479 there where it measured x0.439 on full rows."""
    elsewhere = carrier_json(tmp_path / "a.json", "qwen3-4b-base", STEPS, shape=(1, 4096))
    check = {c.name: c for c in goodput.run(_config(lengths, stack_json=elsewhere)).checks}["stack_at_priced_shape"]
    assert not check.ok and check.detail.startswith(
        "the stack measured at 1 x 4,096 tokens, full unmasked rows; 0.0% of"
    )
    same = carrier_json(tmp_path / "b.json", "qwen3-4b-base", STEPS, shape=(4, 2048))
    packed = {c.name: c for c in goodput.run(_config(lengths, stack_json=same)).checks}["stack_at_priced_shape"]
    assert not packed.ok and "0.0% of packed's priced time" in packed.detail  # the same rows and width, masked
    long_only = write_lengths(tmp_path / "long.parquet", [3000] * 40)  # every row cut to 2,048: full, unmasked
    full = goodput.run(_config(long_only, stack_json=same, strategies=("longest",)))
    check = {c.name: c for c in full.checks}["stack_at_priced_shape"]
    assert check.ok and "100.0% of longest's priced time is in such batches" in check.detail
    mixed = write_lengths(tmp_path / "mixed.parquet", [3000] * 36 + [100] * 4)  # sorted: one narrow batch
    check = {c.name: c for c in goodput.run(_config(mixed, stack_json=same, strategies=("sorted",))).checks}
    assert check["stack_at_priced_shape"].ok  # 9 of 10 batches full: most of the time
    unknown = carrier_json(tmp_path / "c.json", "qwen3-4b-base", STEPS)
    check = {c.name: c for c in goodput.run(_config(lengths, stack_json=unknown)).checks}["stack_at_priced_shape"]
    assert not check.ok and "a shape its file does not give" in check.detail


def test_what_the_price_rests_on_is_checked(lengths, tmp_path):
    """A stack outside the numerics tolerance fails its own check (priced, never passed as the same step); a
    launch-bound row is not `GPU-bound` however small its spread; the factor is of means where rows give them;
    a garbled numerics table or checkpoint is one line, exit 2."""
    outside = carrier_json(tmp_path / "outside.json", "qwen3-4b-base", STEPS)
    checks = {c.name: c for c in goodput.run(_config(lengths, stack_json=outside, stack="bf16-adapters")).checks}
    assert (
        not checks["stack_numerics_within_tolerance"].ok
        and "OUTSIDE" in checks["stack_numerics_within_tolerance"].detail
    )
    assert checks["stack_trustworthy"].ok

    def rewrite(name, edit):
        data = json.loads(outside.read_text())
        edit(data)
        path = tmp_path / name
        path.write_text(json.dumps(data))
        return path

    launch = rewrite("launch.json", lambda d: d["tables"]["carriers"][2].update(launch_bound=True))
    checks = {c.name: c for c in goodput.run(_config(lengths, stack_json=launch)).checks}
    assert not checks["stack_trustworthy"].ok

    def means(d):
        for row, mean in zip(d["tables"]["carriers"], (0.44, 0.31, 0.22)):
            row["mean_step_s"] = mean

    summary = goodput.run(_config(lengths, stack_json=rewrite("means.json", means))).summary
    assert summary["stack_step_factor"] == pytest.approx(0.22 / 0.44)  # not the medians' 0.20 / 0.40
    garbled = rewrite("numerics.json", lambda d: d["tables"].update(numerics=3))
    with pytest.raises(InputError, match="table 'numerics' is not a list of rows"):
        goodput.run(_config(lengths, stack_json=garbled))
    garbled = tmp_path / "ckpt.json"  # a profile's variants table names its model by the config's checkpoint
    garbled.write_text(json.dumps({"config": {"checkpoint": 7}, "tables": {"variants": [{"variant": "baseline"}]}}))
    with pytest.raises(InputError, match="config.checkpoint is 7, not a checkpoint's path"):
        goodput.run(_config(lengths, stack_json=garbled))


def test_the_best_strategy_is_the_one_of_fewest_hours_one_offs_included(lengths):
    """At 200 s a new shape (a compile, say), `longest` has the higher steady goodput and many shapes; `fixed` one shape."""
    result = goodput.run(_config(lengths, strategies=("fixed", "longest"), new_shape_s=200.0))
    rows = {r.strategy: r for r in result.tables["goodput"]}
    assert rows["longest"].goodput_tok_per_s > rows["fixed"].goodput_tok_per_s
    assert rows["fixed"].hours_per_job < rows["longest"].hours_per_job
    assert result.summary["best_strategy"] == "fixed"
    assert result.summary["best_hours_per_job"] == rows["fixed"].hours_per_job


def test_a_profiles_variant_list_is_no_stacked_fit_and_a_replays_variant_is(tmp_path):
    """profile --variant measures variants beside its fit, which stays the baseline's (config `variant`, a list);
    replay --variant fits the step it replays (a name): only that one would count a stack twice."""
    from probes.profile.contract import measured_variant

    path = tmp_path / "p.json"
    for variant, measured in (
        (["bf16-adapters", "compile"], None),
        ([], None),
        ("baseline", None),
        ("compile", "compile"),
    ):
        path.write_text(json.dumps({"config": {"variant": variant}, "tables": {}}))
        assert measured_variant(json.loads(path.read_text())["config"]["variant"], str(path)) == measured
    path.write_text(json.dumps({"config": {"variant": 3}, "tables": {}}))
    with pytest.raises(InputError, match="config.variant is 3"):
        measured_variant(3, str(path))


def test_a_stack_measured_on_packed_rows_prices_packed_batches_at_its_shape(lengths, tmp_path):
    """carrier --rows packed measures the stack on masked rows like packed batches: the check passes there,
    and fails for a corpus of full, unmasked rows; a garbled fill is the file's one-line error."""
    packed = carrier_json(tmp_path / "p.json", "qwen3-4b-base", STEPS, shape=(4, 2048), setup={"rows": "packed"})
    run = goodput.run(_config(lengths, stack_json=packed, strategies=("packed",)))
    check = {c.name: c for c in run.checks}["stack_at_priced_shape"]
    assert check.ok and "4 x 2,048 tokens, packed rows (masked; any mask counts alike); 9" in check.detail
    long_only = write_lengths(tmp_path / "long.parquet", [3000] * 40)
    full = goodput.run(_config(long_only, stack_json=packed, strategies=("longest",)))
    check = {c.name: c for c in full.checks}["stack_at_priced_shape"]
    assert not check.ok and "0.0% of longest's priced time" in check.detail and "unmasked" in check.detail
    bad = carrier_json(tmp_path / "b.json", "qwen3-4b-base", STEPS, shape=(4, 2048), setup={"rows": 7})
    with pytest.raises(InputError, match="b.json: config.rows is 7, not full or packed"):
        goodput.run(_config(lengths, stack_json=bad))


def test_new_shape_s_zero_replaces_the_profiles_one_off(lengths, tmp_path):
    """replay's new_shape_s_confirmed may advise `--new-shape-s 0.000`: 0 replaced nothing (read as unset)."""
    path = _profile(tmp_path / "p.json", "/m/qwen3-4b-base")
    profile = json.loads(path.read_text())
    path.write_text(json.dumps({**profile, "summary": {"new_shape_s": 1.25}}))
    kw = dict(lengths=lengths, batch_size=4, max_length=2048, token_budget=5_000_000, profile=path)
    kept = goodput.run(goodput.Config(**kw)).tables["goodput"]
    zero = goodput.run(goodput.Config(**kw, new_shape_s=0.0)).tables["goodput"]
    assert all(r.new_shapes_s == pytest.approx(1.25 * r.num_shapes) and r.num_shapes > 0 for r in kept)
    assert all(r.new_shapes_s == 0 for r in zero)


def test_a_profile_given_as_a_pipe_is_read_once(lengths, tmp_path):
    """`--profile <(cat p.json)` with --stack-json: the profile was read again to see whether its fit was a
    stack's, and the drained pipe read as an empty file."""
    import os

    profile = _profile(tmp_path / "p.json", "/m/qwen3-4b-base").read_bytes()
    read_end, write_end = os.pipe()  # what a shell's process substitution hands over: /dev/fd/N
    os.write(write_end, profile)
    os.close(write_end)
    stack = carrier_json(tmp_path / "s.json", "qwen3-4b-base", STEPS)
    kw = dict(lengths=lengths, batch_size=4, max_length=2048, token_budget=5_000_000)
    try:
        result = goodput.run(goodput.Config(profile=Path(f"/dev/fd/{read_end}"), stack_json=stack, **kw))
    finally:
        os.close(read_end)
    assert result.summary["stack_step_factor"] == pytest.approx(0.5)
