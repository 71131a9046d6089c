"""goodput: epoch time, goodput and budget hours recomputed here by plain loops over batches."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from lengths_util import write_lengths

from probes.corpus import batching
from probes.goodput import probe as goodput
from runner.cli import main


def test_the_rulings_hours_from_its_step_times(tmp_path):
    """The lab's ruling: Qwen3 0.6B/1.7B/4B at 1.707/2.895/5.714 s a step of 4,096 real tokens,
    23.4M tokens a voice, 3 arms (the three models) x 2 seeds: 2.7/4.6/9.1 h a voice, ~33 h in all."""
    lengths = write_lengths(tmp_path / "l.parquet", [4096] * 64)  # every step 4,096 real tokens, no padding
    budget = dict(token_budget=23_400_000, num_arms=3, num_seeds=2)
    per_voice = []
    for step_s, expected in ((1.707, 2.7), (2.895, 4.6), (5.714, 9.1)):
        result = goodput.run(
            goodput.Config(
                lengths=lengths, batch_size=1, max_length=4096, quadratic_s=0.0, linear_s=0.0, fixed_s=step_s, **budget
            )
        )
        by_hand = 23_400_000 / 4096 * step_s / 3600  # steps a voice x seconds a step
        for row in result.tables["goodput"]:
            assert row.pad_fraction == 0 and row.hours_per_job == pytest.approx(by_hand, rel=1e-9)
            assert round(row.hours_per_job, 1) == expected
        per_voice.append(result.tables["goodput"][0].hours_per_job)
    sweep = goodput.sweep_hours(per_voice, goodput.Budget(23_400_000, num_arms=3, num_seeds=2))
    assert sweep == pytest.approx(2 * sum(23_400_000 / 4096 * s / 3600 for s in (1.707, 2.895, 5.714)))
    assert round(sweep) == 33
    with pytest.raises(ValueError, match="3 arms"):
        goodput.sweep_hours(per_voice[:2], goodput.Budget(23_400_000, num_arms=3, num_seeds=2))


def loop_epoch_s(batches: list[list[int]], width_of, a: float, b: float, c: float) -> float:
    total = 0.0
    for batch in batches:
        width = width_of(batch)
        total += a * len(batch) * width**2 + b * len(batch) * width + c
    return total


def test_strategies_priced_by_plain_loops(tmp_path):
    rng = np.random.default_rng(5)
    lengths = rng.integers(1, 300, 101).tolist()
    path = write_lengths(tmp_path / "l.parquet", lengths)
    a, b, c, bs, width = 1e-7, 1e-4, 0.05, 4, 256
    result = goodput.run(
        goodput.Config(
            lengths=path, batch_size=bs, max_length=width, quadratic_s=a, linear_s=b, fixed_s=c, bucket_size=16
        )
    )
    rows = {r.strategy: r for r in result.tables["goodput"]}
    clipped = [min(x, width) for x in lengths]
    perm = np.random.default_rng(0).permutation(len(lengths))
    shuffled = [clipped[i] for i in perm]
    random_batches = [shuffled[i : i + bs] for i in range(0, len(shuffled), bs)]
    assert rows["fixed"].epoch_s == pytest.approx(loop_epoch_s(random_batches, lambda _: width, a, b, c))
    assert rows["longest"].epoch_s == pytest.approx(loop_epoch_s(random_batches, max, a, b, c))
    real = sum(clipped)
    packed_rows = [width] * (real // width) + ([real % width] if real % width else [])
    packed = [packed_rows[i : i + bs] for i in range(0, len(packed_rows), bs)]
    assert rows["packed"].epoch_s == pytest.approx(loop_epoch_s(packed, lambda _: width, a, b, c))
    # buckets of 16 shuffled samples, each sorted descending (stable), cut into batches of 4
    buckets = [sorted(shuffled[i : i + 16], reverse=True) for i in range(0, len(shuffled), 16)]
    bucketed = [bk[i : i + bs] for bk in buckets for i in range(0, len(bk), bs)]
    assert rows["bucket"].epoch_s == pytest.approx(loop_epoch_s(bucketed, max, a, b, c))
    assert rows["bucket"].bucket_size == 16
    for r in rows.values():
        assert r.real_tokens == real and r.goodput_tok_per_s == pytest.approx(real / r.epoch_s)
        assert r.hours_per_job == pytest.approx(r.epoch_s / 3600)  # no budget: one epoch
    assert rows["sorted"].epoch_s <= rows["bucket"].epoch_s <= rows["longest"].epoch_s <= rows["fixed"].epoch_s
    assert result.ok


def test_sorted_batches_are_the_padding_probes_optimum():
    from probes.padding import probe as padding

    rng = np.random.default_rng(1)
    for n in (37, 40, 41):
        lengths = rng.integers(1, 500, n)
        made = batching.make("sorted", lengths, batch_size=4, max_length=512)
        padded = int((made.rows * made.widths).sum() - made.real_tokens.sum())
        assert padded == padding.padded_optimum(np.minimum(lengths, 512), 4)
        assert sorted(made.row_lengths.tolist()) == sorted(lengths.tolist()) and made.rows.sum() == n


def profile_json(tmp_path: Path, launch_bound_small: bool | None = True) -> Path:
    """A profile result as `labprobe probe profile --json` writes it (only the tables goodput reads)."""
    a, b, c = 2e-9, 7e-5, 0.06
    scaling = [
        {
            "seq_len": n,
            "batch_size": 1,
            "tokens": n,
            "status": "ok",
            "step_s": 0.26 if n == 1024 else a * n * n + b * n + c,
            "launch_bound": launch_bound_small if n == 1024 else (None if launch_bound_small is None else False),
            "in_fit": n != 1024 or launch_bound_small is None,
        }
        for n in (1024, 2048, 4096, 8192)
    ]
    fit = [{"term": t, "coef": v} for t, v in (("quadratic", a), ("linear", b), ("fixed", c))]
    penalty = [{"case": "half_padded", "penalty_same_shape_pct": 20.0}]
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"tables": {"scaling": scaling, "fit": fit, "padding_penalty": penalty}}))
    return path


def test_model_from_a_profile_floor_mask_and_range(tmp_path):
    model = goodput.step_model(goodput.Config(lengths=Path("x"), profile=profile_json(tmp_path)))
    assert (model.min_len, model.max_len, model.launch_points) == (2048, 8192, ((1024, 0.26),))
    poly = lambda rows, w: 2e-9 * rows * w * w + 7e-5 * rows * w + 0.06  # noqa: E731
    # GPU-bound and maskless: the polynomial itself; masked: +20% (the same-shape padding penalty)
    assert model.predict([1], [4096], [False])[0] == pytest.approx(poly(1, 4096))
    assert model.predict([2], [4096], [True])[0] == pytest.approx(1.2 * poly(2, 4096))
    # below the fit: interpolated in tokens between the launch-bound point and the fit's edge
    edge = poly(1, 2048)
    assert model.predict([1], [1536], [False])[0] == pytest.approx(0.26 + (edge - 0.26) * 512 / 1024)
    assert model.predict([1], [100], [False])[0] == pytest.approx(0.26)
    assert not model.outside([1, 1], [100, 8192]).any() and model.outside([1], [9000]).all()


def test_checks_say_when_the_fit_is_stretched_or_launch_bound(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", [6000, 7000, 9000, 12000] * 8)
    result = goodput.run(
        goodput.Config(
            lengths=path, profile=profile_json(tmp_path), batch_size=2, max_length=16384, strategies=("longest",)
        )
    )
    failed = {c.name: c.detail for c in result.checks if not c.ok}
    assert set(failed) == {"within_fitted_range"} and "longest" in failed["within_fitted_range"]
    cpu = goodput.run(
        goodput.Config(
            lengths=path, profile=profile_json(tmp_path, None), batch_size=2, max_length=8192, strategies=("longest",)
        )
    )
    failed = {c.name: c.detail for c in cpu.checks if not c.ok}
    assert set(failed) == {"fit_gpu_bound"} and "not known" in failed["fit_gpu_bound"]


def test_cli_json_and_bad_input(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", [100, 200, 300, 400, 500] * 10)
    argv = [
        "probe",
        "goodput",
        "--lengths",
        str(path),
        "--profile",
        str(profile_json(tmp_path)),
        "--batch-size",
        "2",
        "--max-length",
        "512",
        "--token-budget",
        "1000000",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["strategy"] for r in out["tables"]["goodput"]] == list(batching.STRATEGIES)
    assert main(["probe", "goodput", "--lengths", str(path), "--linear-s", "1e-4"]) == 2
    err = capsys.readouterr().err
    assert "exactly one step-time model" in err and len(err.strip().splitlines()) == 1
    for value in ("-5", "nan"):  # they priced negative or NaN hours at exit 0
        given = ["--profile", str(profile_json(tmp_path)), "--new-shape-s", value]
        assert main(["probe", "goodput", "--lengths", str(path), *given]) == 2
        err = capsys.readouterr().err
        assert (
            "--new-shape-s: expected a finite number of seconds >= 0" in err and len(err.strip().splitlines()) == 1
        ), err
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    assert main(["probe", "goodput", "--lengths", str(path), "--profile", str(bad)]) == 2
    assert "no fit" in capsys.readouterr().err
    fit_only = json.loads(profile_json(tmp_path).read_text())
    fit_only["tables"]["scaling"] = []
    bad.write_text(json.dumps(fit_only))
    assert main(["probe", "goodput", "--lengths", str(path), "--profile", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "no fitted point" in err and len(err.strip().splitlines()) == 1


def test_each_new_batch_shape_is_paid_once_a_job(tmp_path):
    lengths = [100, 100, 200, 300, 300, 300]
    path = write_lengths(tmp_path / "l.parquet", lengths)
    result = goodput.run(
        goodput.Config(
            lengths=path,
            batch_size=1,
            max_length=512,
            strategies=("longest",),
            quadratic_s=0.0,
            linear_s=1e-3,
            fixed_s=0.0,
            new_shape_s=2.0,
            token_budget=13_000,
        )
    )
    (row,) = result.tables["goodput"]
    epoch_s = sum(1e-3 * x for x in lengths)  # 1.3 s for 1,300 real tokens
    assert row.epoch_s == pytest.approx(epoch_s) and row.num_shapes == 3 and row.new_shapes_s == 6.0
    # 13,000 tokens is ten epochs; the three shapes' first steps are paid once, not once an epoch
    assert row.hours_per_job == pytest.approx((10 * epoch_s + 6.0) / 3600)


def test_a_profile_that_does_not_read_as_one_is_one_line_exit_2(tmp_path, capsys):
    """A JSON list, tables of the wrong shape, a coefficient or a length that is no number: one line naming the
    file and the table, exit 2 (they were an AttributeError, KeyError or TypeError traceback, or NaN hours)."""
    path = write_lengths(tmp_path / "l.parquet", [100, 200, 300, 400, 500] * 10)
    good = json.loads(profile_json(tmp_path).read_text())

    def edited(edit) -> dict:
        doc = json.loads(json.dumps(good))
        edit(doc["tables"])
        return doc

    cases = [
        ([good], "not a profile result"),
        ({"tables": []}, "not a profile result"),
        ({"tables": {"fit": "x"}}, "table 'fit' is not a list of rows"),
        (edited(lambda t: t["fit"][2].update(coef=None)), "table 'fit': coef is None, not a number"),
        (edited(lambda t: t["fit"][2].update(coef=float("nan"))), "table 'fit': coef is nan, not a number"),
        (edited(lambda t: t["fit"][2].update(coef="0.1")), "table 'fit': coef is '0.1', not a number"),
        (edited(lambda t: t["fit"][2].pop("coef")), "table 'fit': coef is None, not a number"),
        (edited(lambda t: t["scaling"][1].pop("seq_len")), "table 'scaling': seq_len is None, not a number"),
        (edited(lambda t: t["scaling"][0].update(step_s=None)), "table 'scaling': step_s is None, not a number"),
        (edited(lambda t: t.update(padding_penalty={})), "table 'padding_penalty' is not a list of rows"),
    ]
    bad = tmp_path / "bad.json"
    for doc, needle in cases:
        bad.write_text(json.dumps(doc))
        assert main(["probe", "goodput", "--lengths", str(path), "--profile", str(bad)]) == 2, needle
        err = capsys.readouterr().err.strip()
        assert f"{bad}: " in err and needle in err and len(err.splitlines()) == 1, err


def given(lengths: Path, **kw) -> goodput.Config:
    """goodput over `lengths` with a step model given as terms (a linear one unless kw says otherwise)."""
    terms = {"quadratic_s": 0.0, "linear_s": 1e-4, "fixed_s": 0.01, **kw}
    return goodput.Config(lengths=lengths, **terms)


def test_truncated_samples_and_tokens_are_counted(tmp_path):
    lengths = write_lengths(tmp_path / "l.parquet", [100, 900, 300, 2000, 50, 700, 1200, 400] * 12)
    s = goodput.run(given(lengths, max_length=1000)).summary
    assert (s["truncated_samples"], s["truncated_tokens"]) == (24, (1000 + 200) * 12)
    assert s["truncated_tokens_pct"] == pytest.approx(100 * 14_400 / (5650 * 12))


def test_new_shape_costs_only_for_the_batches_the_budget_reaches(tmp_path):
    """A budget ending inside the first epoch meets the shapes of the batches before its end, not all."""
    lengths = np.arange(101, 201)  # 100 distinct widths at one row a batch
    path = write_lengths(tmp_path / "l.parquet", lengths.tolist())
    config = given(path, batch_size=1, max_length=512, strategies=("longest",), new_shape_s=1.0, token_budget=1490)
    (row,) = goodput.run(config).tables["goodput"]
    epoch = batching.make("longest", lengths, batch_size=1, max_length=512, seed=0)
    reached = int(np.searchsorted(np.cumsum(epoch.real_tokens), 1490)) + 1
    assert row.num_shapes == reached < 100 and row.new_shapes_s == reached


def test_launch_points_cover_only_batches_of_fewer_tokens_than_the_fit(tmp_path):
    """Narrow rows stacked into a batch of more tokens than the fit's first point are the polynomial stretched."""
    path = write_lengths(tmp_path / "l.parquet", [200] * 64)
    config = given(path, batch_size=8, max_length=256, strategies=("longest",), fit_min_len=256, floor_s=0.06)
    result = goodput.run(config)
    assert result.tables["goodput"][0].outside_fit_time_pct == pytest.approx(100)
    assert not {c.name: c.ok for c in result.checks}["within_fitted_range"]
    covered = goodput.run(
        given(path, batch_size=1, max_length=256, strategies=("longest",), fit_min_len=256, floor_s=0.06)
    )
    assert covered.tables["goodput"][0].outside_fit_time_pct == 0  # 200 tokens < the fit's 256: the launch point


def test_given_terms_are_said_to_be_given_and_a_zero_step_is_refused(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", [100, 200, 300])
    checks = {c.name: c for c in goodput.run(given(path, max_length=512, strategies=("longest",))).checks}
    assert checks["fit_gpu_bound"].detail.startswith("given terms")
    assert "the given fit's lengths" in checks["within_fitted_range"].detail
    argv = ["probe", "goodput", "--lengths", str(path), "--quadratic-s", "0", "--linear-s", "0", "--fixed-s", "0"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the given step model takes 0 s a step" in err
