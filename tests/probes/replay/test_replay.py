"""replay on the CPU with a tiny Qwen3: the real batch shapes in the strategy's order, every step
timed, predicted and measured summed as the table says. (Whether the prediction holds within 5% is
a GPU figure: benchmarks/bench_goodput_gpu.py, benchmarks/RESULTS.md.)"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from stack_util import carrier_json

from probes.corpus import batching
from probes.profile.contract import read_step_model
from probes.replay import model as replay_model
from probes.replay import probe as replay
from probes.result import InputError
from runner.cli import main
from tests.probes.conftest import tiny_config


@pytest.fixture(scope="module")
def lengths_file(tmp_path_factory) -> Path:
    rng = np.random.default_rng(2)
    lengths = np.minimum(rng.lognormal(3.0, 0.8, 60).astype(int) + 2, 64)
    path = tmp_path_factory.mktemp("replay") / "lengths.parquet"
    pq.write_table(pa.table({"length": lengths.tolist()}), path)
    return path


@pytest.fixture(scope="module")
def compiled_setup(tmp_path_factory) -> tuple[Path, Path]:
    """The compiled replays' checkpoint and lengths: `tiny` with one layer (each layer of two compiles its own
    graph: the first's input needs no gradient), and eight samples 16 tokens long but one of 15, whose `longest`
    batches of 4 are all 16 wide, padded (a mask) or not: two kinds of batch, so two graphs, and no width that
    changes (a graph with a dynamic width compiles its own kernels: measured, 112 s of CPU against 85 s)."""
    path = tmp_path_factory.mktemp("compiled")
    tiny_config(layers=1).save_pretrained(path / "tiny1")
    pq.write_table(pa.table({"length": [16] * 7 + [15]}), path / "lengths.parquet")
    return path / "tiny1", path / "lengths.parquet"


def test_replays_the_strategies_batches_in_order(tiny, lengths_file):
    config = replay.Config(
        checkpoint=tiny,
        lengths=lengths_file,
        weights="random",
        lora_rank=4,
        batch_size=4,
        max_length=48,
        strategies=("longest", "bucket"),
        bucket_size=16,
        num_steps=20,
        warmup_steps=1,
        fit_lens=(8, 16, 32, 48),
        fit_steps=2,
        device="cpu",
    )
    result = replay.run(config)
    lengths = pq.read_table(lengths_file).column("length").to_numpy()
    steps = result.tables["replay_steps"]
    for strategy in ("longest", "bucket"):
        mine = [s for s in steps if s.strategy == strategy]
        # 60 samples in batches of 4: 15 an epoch, so steps 15-19 are the next epoch (seed 1)
        expected = []
        for seed in (0, 1):
            epoch = batching.make(strategy, lengths, batch_size=4, max_length=48, seed=seed, bucket_size=16)
            expected += [epoch.batch(i) for i in range(epoch.num_batches)]
        assert [(s.rows, s.width, s.real_tokens) for s in mine] == [
            (len(b), int(b.max()), int(b.sum())) for b in expected[:20]
        ]
        row = next(r for r in result.tables["replay"] if r.strategy == strategy)
        assert row.num_steps == 20 and row.measured_s == pytest.approx(sum(s.measured_s for s in mine))
        assert row.predicted_s == pytest.approx(sum(s.predicted_s for s in mine))
        assert row.error_pct == pytest.approx(100 * (row.predicted_s - row.measured_s) / row.measured_s)
        assert all(s.measured_s > 0 for s in mine)
    fit = {f.term: f.coef for f in result.tables["fit"]}
    # a shape's first step in the process pays new_shape_s once: the fit's widths and each strategy's
    # warm-up (its widest batch) ran before the timed steps, and longest ran before bucket
    seen = {(4, w) for w in (8, 16, 32, 48)}
    extra = result.summary["new_shape_s"]
    for strategy in ("longest", "bucket"):
        mine = [s for s in steps if s.strategy == strategy]
        seen.add(max(((s.rows, s.width) for s in mine), key=lambda shape: shape[0] * shape[1]))
        for s in mine:
            assert s.new_shape == ((s.rows, s.width) not in seen)
            seen.add((s.rows, s.width))
            poly = fit["quadratic"] * s.rows * s.width**2 + fit["linear"] * s.rows * s.width + fit["fixed"]
            assert s.predicted_s == pytest.approx(poly + extra * s.new_shape)
    assert any(s.new_shape for s in steps) and not all(s.new_shape for s in steps)
    width, rows = 32, 4
    point = next(r for r in result.tables["scaling"] if r.seq_len == width)
    assert point.fit_s == pytest.approx(
        fit["quadratic"] * rows * width**2 + fit["linear"] * rows * width + fit["fixed"]
    )
    assert [c.name for c in result.checks] == ["replay_within_5pct", "new_shape_s_confirmed"]
    assert "timings.json" in result.artifacts
    # the one-off, the median of the fit points' (the widest, timed first, left out) and measured a second way
    fit_excess = result.summary["new_shape_fit_excess_s"]
    assert set(fit_excess) == {"fit/8", "fit/16", "fit/32"}
    assert extra == pytest.approx(max(0.0, float(np.median(list(fit_excess.values())))))
    miss = {k: np.mean([s.measured_s - s.predicted_s for s in steps if s.strategy == k and not s.new_shape])
            for k in ("longest", "bucket")}  # fmt: skip
    new = [s.measured_s - (s.predicted_s - extra) - miss[s.strategy] for s in steps if s.new_shape]
    assert result.summary["new_shape_replayed_steps"] == len(new)
    assert result.summary["new_shape_replayed_s"] == pytest.approx(float(np.mean(new)))


def test_predicts_from_a_profile_json_and_refuses_an_unknown_strategy(tiny, lengths_file, tmp_path, capsys):
    profile = _linear_profile(tmp_path / "p.json")
    argv = [
        "probe",
        "replay",
        "--checkpoint",
        str(tiny),
        "--lengths",
        str(lengths_file),
        "--weights",
        "random",
        "--batch-size",
        "4",
        "--max-length",
        "48",
        "--strategies",
        "sorted",
        "--num-steps",
        "5",
        "--profile",
        str(profile),
        "--device",
        "cpu",
        "--json",
    ]
    main(argv)
    out = json.loads(capsys.readouterr().out)
    steps = out["tables"]["replay_steps"]
    assert len(steps) == 5 and "scaling" not in out["tables"]
    for s in steps:
        assert s["predicted_s"] == pytest.approx(0.01 + 1e-5 * s["rows"] * s["width"])
    assert main(argv[:-3] + ["--strategies", "zigzag"]) == 2
    assert "cannot replay ['zigzag']" in capsys.readouterr().err
    assert main(argv[:12] + ["--strategies", "packed"] + argv[14:]) in (0, 1)  # packed is replayed as goodput prices it
    out = json.loads(capsys.readouterr().out)
    epoch = batching.make(
        "packed", pq.read_table(lengths_file).column("length").to_numpy(), batch_size=4, max_length=48
    )
    steps = out["tables"]["replay_steps"]
    assert [(s["rows"], s["width"], s["real_tokens"], s["masked"]) for s in steps] == [
        (int(epoch.rows[i]), 48, int(epoch.real_tokens[i]), True) for i in range(5)
    ]
    for s in steps:
        assert s["predicted_s"] == pytest.approx(0.01 + 1e-5 * s["rows"] * 48)


def test_a_packed_row_keeps_its_sequences_apart_as_a_packing_collator_does(tiny):
    """Restarting positions and no attention mask: transformers builds the block-diagonal mask, so the second
    sequence of a packed row sees nothing of the first (its hidden states are those of the sequence alone)."""
    from transformers import AutoModelForCausalLM

    from probes.step.train import models

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(
        replay.load_text_config(tiny), attn_implementation="sdpa", dtype=torch.float32
    ).eval()
    batch = models.make_batch(
        vocab_size=model.config.vocab_size, batch_size=2, seq_len=16, device=torch.device("cpu"), packed=[[5, 7], [9]]
    )
    assert "attention_mask" not in batch
    assert batch["position_ids"][0].tolist() == [*range(5), *range(7), *range(4)]  # the row's tail is padding
    assert batch["labels"][1, 9:].eq(-100).all() and batch["labels"][0, :12].ne(-100).all()
    with torch.no_grad():
        # as the harness calls it: no cache (with one, transformers never looks for packed sequences)
        packed = model.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"], use_cache=False)
        alone = model.model(input_ids=batch["input_ids"][:1, 5:12], use_cache=False).last_hidden_state
    torch.testing.assert_close(packed.last_hidden_state[0, 5:12], alone[0], rtol=1e-5, atol=1e-5)
    with torch.no_grad():  # the same row as one sequence: the second part does see the first
        whole = model.model(input_ids=batch["input_ids"][:1, :12], use_cache=False).last_hidden_state
    assert not torch.allclose(whole[0, 5:12], alone[0], rtol=1e-3, atol=1e-3)


def test_new_shape_cost_is_the_median_first_step_excess_without_the_first_point():
    """One outlier among the few fit points rules a mean (an H100's 1.25 s against 0.15 s replayed)."""
    raw = {
        "fit/64": {"raw_s": [5.0, 1.0, 1.0, 1.0], "num_warmup_configured": 1},  # the process's first
        "fit/32": {"raw_s": [0.9, 0.5, 0.6, 0.7], "num_warmup_configured": 1},  # 0.9 - 0.6 = 0.3
        "fit/16": {"raw_s": [0.5, 0.4, 0.1, 0.3], "num_warmup_configured": 2},  # 0.5 - 0.2 = 0.3
        "fit/8": {"raw_s": [6.2, 0.2, 0.2], "num_warmup_configured": 1},  # an outlier: 6.0
        "ce/chunked": {"raw_s": [9.0, 1.0], "num_warmup_configured": 1},
    }
    excess = replay_model.new_shape_excess_s(raw, "fit/64")
    assert excess == pytest.approx({"fit/32": 0.3, "fit/16": 0.3, "fit/8": 6.0})
    assert replay_model.new_shape_s(raw, "fit/64") == pytest.approx(0.3)  # the mean would say 2.2
    assert replay_model.new_shape_s({"fit/64": raw["fit/64"]}, "fit/64") == 0.0


def test_the_one_off_replayed_a_second_way_names_the_price_that_fits():
    """An H100's fit priced 1.25 s a new shape where the replay's new-shape steps cost 0.15 s more than their
    steady prediction: the check names the value to price with; steps that compiled a graph are left out."""
    from probes.replay.probe import StepRow

    def step(i, measured, new=True, strategy="longest"):
        steady = 0.3
        return StepRow(strategy=strategy, step=i, rows=3, width=100 + i, real_tokens=300, masked=True,
                       new_shape=new, predicted_s=steady + 1.25 * new, measured_s=measured)  # fmt: skip

    steps = [step(i, 0.45) for i in range(6)] + [step(6, 0.3, new=False), step(7, 30.0)]
    summary, check = replay_model.new_shape_replayed(steps, {("longest", 7)}, 1.25)
    assert summary == {"new_shape_replayed_s": pytest.approx(0.15), "new_shape_replayed_steps": 6}
    assert not check.ok and check.detail.endswith("the model charged 1.250 s: price with goodput --new-shape-s 0.150")
    # a steady model 0.03 s short on every step, new or not: only the 1.25 s one-off is measured
    off = [step(i, 0.33 + 1.25 * (i < 6), new=i < 6) for i in range(8)]
    summary, check = replay_model.new_shape_replayed(off, set(), 1.25)
    assert summary["new_shape_replayed_s"] == pytest.approx(1.25) and check.ok
    # a strategy of new shapes only takes the others' steady miss
    only_new = [step(i, 0.33 + 0.2, strategy="sorted") for i in range(5)]
    summary, _ = replay_model.new_shape_replayed(off[6:] + only_new, set(), 1.25)
    assert summary["new_shape_replayed_s"] == pytest.approx(0.2)
    _, close = replay_model.new_shape_replayed([step(i, 0.3 + 1.0, True) for i in range(6)], set(), 1.25)
    assert close.ok  # 1.0 against 1.25: within half
    _, few = replay_model.new_shape_replayed(steps[:4], set(), 1.25)
    assert few.ok and "not compared" in few.detail


def _replay_argv(tiny, lengths_file, *extra) -> list[str]:
    return [
        "probe",
        "replay",
        "--checkpoint",
        str(tiny),
        "--lengths",
        str(lengths_file),
        "--weights",
        "random",
        "--lora-rank",
        "4",
        "--batch-size",
        "4",
        "--max-length",
        "48",
        "--strategies",
        "longest",
        "--num-steps",
        "6",
        "--warmup-steps",
        "1",
        "--fit-lens",
        "8",
        "--fit-lens",
        "16",
        "--fit-lens",
        "32",
        "--fit-lens",
        "48",
        "--fit-steps",
        "2",
        "--device",
        "cpu",
        *extra,
        "--json",
    ]


def test_a_stack_is_applied_to_the_session_as_the_worker_applies_it(tiny):
    config = replay.Config(checkpoint=tiny, lengths=Path("x.csv"), weights="random", lora_rank=4, device="cpu")
    plain, stacked = replay._session(config), replay._session(dataclasses.replace(config, variant="bf16-adapters"))
    for session in (plain, stacked):
        session.load()
    dtypes = [{p.dtype for p in s.model.parameters() if p.requires_grad} for s in (plain, stacked)]
    assert dtypes == [{torch.float32}, {torch.bfloat16}]
    fused = replay._session(dataclasses.replace(config, variant="fused-adamw+ce-chunk=0"))
    assert fused.chunk == 0 and plain.chunk == config.ce_chunk
    fused.load()
    optimizer = fused.pieces.make_optimizer([p for p in fused.model.parameters() if p.requires_grad])
    assert optimizer.defaults["fused"] is True


def test_replay_with_the_stack_goodput_priced_checks_that_price(tiny, lengths_file, tmp_path, capsys):
    """A plain replay's own fit serves as the profile; the stacked replay predicts from it scaled by the
    carrier's factor (as goodput prices the hours), measures its steps with the stack, and reports the error."""
    assert main(_replay_argv(tiny, lengths_file)) in (0, 1)  # the 5% check is a GPU figure
    profile = tmp_path / "replay.json"
    profile.write_text(capsys.readouterr().out)
    steps = {"baseline": 0.4, "bf16-adapters": 0.3, "bf16-adapters+fused-adamw": 0.2}
    stack_file = carrier_json(tmp_path / "carrier.json", tiny.name, steps)
    stacked = ["--variant", "fused-adamw+bf16-adapters", "--profile", str(profile), "--stack-json", str(stack_file)]
    assert main(_replay_argv(tiny, lengths_file, *stacked)) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    model = read_step_model(profile)
    assert (
        out["summary"]["variant"] == "bf16-adapters+fused-adamw"
    )  # asked in another order, stored as carrier stores it
    assert out["summary"]["stack_step_factor"] == pytest.approx(0.5) and "x0.5000" in out["summary"]["step_model"]
    for s in out["tables"]["replay_steps"]:
        unscaled = float(model.predict([s["rows"]], [s["width"]], [s["masked"]])[0])
        assert s["predicted_s"] == pytest.approx(0.5 * unscaled + s["new_shape"] * model.new_shape_s)
    (row,) = out["tables"]["replay"]
    assert row["error_pct"] == pytest.approx(100 * (row["predicted_s"] - row["measured_s"]) / row["measured_s"])
    assert "replay_within_5pct" in {c["name"] for c in out["checks"]}


def test_bad_stack_inputs_of_replay_are_one_line_exit_2(tiny, lengths_file, tmp_path, capsys):
    stack_file = carrier_json(tmp_path / "carrier.json", tiny.name, {"baseline": 0.4, "compile": 0.3})
    profile = tmp_path / "p.json"
    profile.write_text(json.dumps({"tables": {}}))
    cases = [
        (["--stack-json", str(stack_file), "--profile", str(profile)], "--stack-json needs --variant"),
        (["--variant", "compile", "--stack-json", str(stack_file)], "--stack-json needs --variant"),
        (["--variant", "bf16-autocast+bf16-adapters"], "--variant"),
        (["--variant", "nope"], "'nope': unknown"),
    ]
    for extra, needle in cases:
        assert main(_replay_argv(tiny, lengths_file, *extra)) == 2
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    fit = [{"term": t, "coef": c} for t, c in (("quadratic", 0.0), ("linear", 1e-5), ("fixed", 0.01))]
    profile.write_text(
        json.dumps({"tables": {"fit": fit, "scaling": [{"seq_len": 8, "batch_size": 1, "tokens": 8, "in_fit": True}]}})
    )
    missing = ["--variant", "bf16-adapters", "--profile", str(profile), "--stack-json", str(stack_file)]
    assert main(_replay_argv(tiny, lengths_file, *missing)) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "carrier.json: no row for 'bf16-adapters' (measured: baseline, compile)" in err and len(err.splitlines()) == 1
    )
    # another model's carrier run: its saving is no price of this model's step (it was applied silently)
    other = carrier_json(tmp_path / "other.json", "qwen3-4b-base", {"baseline": 0.4, "compile": 0.3})
    stacked = ["--variant", "compile", "--profile", str(profile), "--stack-json", str(other)]
    assert main(_replay_argv(tiny, lengths_file, *stacked)) == 2
    err = capsys.readouterr().err.strip()
    assert f"other.json: rows of qwen3-4b-base only, none of {tiny.name!r}" in err and len(err.splitlines()) == 1, err


def test_a_last_packed_row_alone_is_replayed_and_priced_at_the_packing_length(tiny, tmp_path, monkeypatch):
    """Five samples of 40 tokens and one of 5, packed at 48: four full rows, then a lone row of 13 real tokens.
    A packing collator pads that row to 48 and goodput prices it at 48: the replay times and predicts it so,
    not at its 13 tokens."""
    lengths = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"length": [40] * 5 + [5]}), lengths)
    built = []
    make_batch = replay.models.make_batch
    monkeypatch.setattr(replay.models, "make_batch", lambda **kw: built.append(kw["seq_len"]) or make_batch(**kw))
    config = _from_profile(tiny, lengths, _linear_profile(tmp_path / "p.json"), strategies=("packed",), num_steps=2)
    result = replay.run(config)
    steps = result.tables["replay_steps"]
    assert [(s.rows, s.width, s.real_tokens) for s in steps] == [(4, 48, 192), (1, 48, 13)]
    assert built == [48, 48]
    # the warm-up ran (4, 48), the widest: the lone row's shape is new to the process
    assert [s.new_shape for s in steps] == [False, True]
    assert steps[1].predicted_s == pytest.approx(0.01 + 1e-5 * 48 + result.summary["new_shape_s"])


def test_a_packing_length_far_too_large_is_an_out_of_memory_row_not_a_traceback(tiny, tmp_path):
    """--max-length 10^11 on the CPU: every packed row is that wide, and the allocator refuses the batch; the
    strategy's row says so and the replay's check fails, as an out-of-memory on a GPU does."""
    lengths = tmp_path / "lengths.parquet"
    pq.write_table(pa.table({"length": [30, 40]}), lengths)
    profile = _linear_profile(tmp_path / "p.json")
    config = _from_profile(tiny, lengths, profile, strategies=("packed",), num_steps=1, max_length=10**11)
    result = replay.run(config)
    (row,) = result.tables["replay"]
    assert row.status.startswith("oom: ") and "allocate" in row.status and row.measured_s is None
    checks = {c.name: c for c in result.checks}
    assert not checks["replay_within_5pct"].ok and "not compared" in checks["new_shape_s_confirmed"].detail


def test_a_compiled_stack_warms_up_one_batch_per_graph_dynamo_compiles():
    def batch(rows: int, width: int, padded: bool) -> np.ndarray:
        return np.array([width - (padded and i == 0) for i in range(rows)])

    batches = [
        batch(6, 128, True),  # 0: padded, several rows: first of its kind
        batch(6, 128, True),
        batch(6, 96, True),  # 2: another width -> the width goes dynamic
        batch(4, 96, True),  # 3: another row count -> the rows go dynamic
        batch(6, 64, True),
        batch(6, 128, False),  # 5: unpadded, several rows: another graph
        batch(1, 64, False),  # 6: one row
        batch(1, 50, False),  # 7: one row, another width
        batch(2, 50, False),
    ]
    assert replay.graph_warm_indices(batches) == [0, 2, 3, 5, 6, 7, 8]
    assert replay.warm_indices(batches, 1) == [0]  # not compiled: the widest alone
    assert replay.warm_indices(batches, 2, compiled=True) == [0, 1, 2, 3, 5, 6, 7, 8]


def _from_profile(tiny: Path, lengths_file: Path, profile: Path, **changes) -> replay.Config:
    """A replay predicted from --profile: no fit point runs (or compiles a graph) before the replay."""
    given = dict(
        checkpoint=tiny,
        lengths=lengths_file,
        weights="random",
        lora_rank=4,
        batch_size=4,
        max_length=48,
        strategies=("longest",),
        num_steps=6,
        warmup_steps=1,
        profile=profile,
        device="cpu",
    )
    return replay.Config(**{**given, **changes})


def _compiled(tiny: Path, lengths_file: Path, profile: Path) -> replay.Config:
    """A replay of `compile` predicted from --profile, marked as measured with compile (a baseline profile
    replayed with a stack and no --stack-json is refused: its prediction is of another step)."""
    data = json.loads(profile.read_text())
    data["config"] = {**(data.get("config") or {}), "variant": "compile"}
    profile.write_text(json.dumps(data))
    return _from_profile(tiny, lengths_file, profile, variant="compile")


def _linear_profile(path: Path) -> Path:
    """A profile whose step is 0.01 s + 1e-5 s a token."""
    fit = [{"term": "quadratic", "coef": 0.0}, {"term": "linear", "coef": 1e-5}, {"term": "fixed", "coef": 0.01}]
    scaling = [
        {"seq_len": n, "batch_size": 1, "tokens": n, "in_fit": True, "launch_bound": False, "step_s": 0.01 + 1e-5 * n}
        for n in (8, 32, 64)
    ]
    path.write_text(json.dumps({"tables": {"fit": fit, "scaling": scaling}}))
    return path


@pytest.fixture
def dynamo_eager():
    """Dynamo with its `eager` backend (PyTorch's own debugging override; config.patch, as below). These tests count
    dynamo's graphs, recompiles and recompile-limit hits. Their batches keep one shape (four rows, 16 wide, padded or
    not), so no dimension goes dynamic and Inductor has no shape of its own to guard: the eager backend compiles the
    same graphs (measured: 2 graphs and none in a timed step, then 1 and one in step 1, under either). Inductor's
    kernels cost ~60 s of a 2-core CPU here (the first test: 72 s -> 10 s). test_variants compiles with Inductor.
    A torch without the override compiles with Inductor."""
    if not hasattr(torch._dynamo.config, "debug_backend_override"):
        yield
        return
    with torch._dynamo.config.patch(debug_backend_override=">=0:eager"):
        yield


def test_a_compiled_replay_times_no_step_that_compiles(compiled_setup, tmp_path, monkeypatch, dynamo_eager):
    """compile's recompiles (a few graphs a job, each about as long as the first compile) are paid in the
    warm-up, as a job pays them once at its start; without it the timed steps would carry them. The step model
    comes from --profile, so no fit point compiles the graphs first."""
    checkpoint, lengths = compiled_setup
    config = _compiled(checkpoint, lengths, _linear_profile(tmp_path / "p.json"))
    batches = replay.shapes(config, pq.read_table(lengths).column("length").to_numpy(), "longest", None)
    assert {int(b.max()) for b in batches} == {16} and len(set(replay.masked_batches(batches, False))) == 2
    torch._dynamo.reset()
    summary = replay.run(config).summary
    assert summary["graphs_compiled"] >= 2 and summary["compiled_in_steps_longest"] == []
    torch._dynamo.reset()
    monkeypatch.setattr(replay, "graph_warm_indices", lambda *args: [])
    widest_only = replay.run(config).summary
    assert widest_only["compiled_in_steps_longest"] != []
    assert widest_only["graphs_compiled"] < summary["graphs_compiled"]


def test_a_compiled_replay_past_dynamo_recompile_limit_fails_a_check(compiled_setup, tmp_path, dynamo_eager):
    """Past the limit dynamo runs the layer eagerly for the new kind of batch, silently: the replay says so."""
    config = _compiled(*compiled_setup, _linear_profile(tmp_path / "p.json"))
    torch._dynamo.reset()
    checks = {c.name: c for c in replay.run(config).checks}
    assert checks["compiled_graphs_within_limit"].ok
    torch._dynamo.reset()
    # config.patch, not monkeypatch: monkeypatch's undo wrote the value back past dynamo's config
    # (recompile_limit then read "does not exist" in later tests of the same process)
    with torch._dynamo.config.patch(recompile_limit=1):
        check = {c.name: c for c in replay.run(config).checks}["compiled_graphs_within_limit"]
    assert not check.ok and "recompile_limit (1)" in check.detail


def test_fixed_is_refused_in_one_line_not_replayed_as_longest(capsys):
    """goodput prices `fixed` at --max-length a batch; replay builds batches at their longest row, so a
    `fixed` replay would check another strategy's price: refused, exit 2."""
    from runner.cli import main

    code = main(["probe", "replay", "--lengths", "x.csv", "--checkpoint", ".", "--strategies", "fixed"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "cannot replay ['fixed']" in err


def test_a_profile_of_another_step_is_refused_in_one_line(tiny, lengths_file, tmp_path):
    """Without --stack-json the profile's prediction is compared as it is: a baseline profile replayed with a
    stack (or the reverse) compared two different steps; with --stack-json a profile measured with a stack
    would have been scaled by it twice."""
    baseline = _linear_profile(tmp_path / "p.json")
    with pytest.raises(InputError, match="measured with the baseline, replayed with compile; give --stack-json"):
        replay.run(_from_profile(tiny, lengths_file, baseline, variant="compile"))
    stacked = tmp_path / "stacked.json"
    stacked.write_text(json.dumps({**json.loads(baseline.read_text()), "config": {"variant": "compile"}}))
    with pytest.raises(InputError, match="measured with compile, replayed with the baseline"):
        replay.run(_from_profile(tiny, lengths_file, stacked))
    other = tmp_path / "other.json"  # another model's fit: it predicted the replay within 5% before, exit 0
    other.write_text(json.dumps({**json.loads(baseline.read_text()), "config": {"checkpoint": "/m/qwen3-4b-base"}}))
    with pytest.raises(InputError, match=f"a fit of qwen3-4b-base, and this replay runs {tiny.name}"):
        replay.run(_from_profile(tiny, lengths_file, other))
    h100 = tmp_path / "h100.json"  # a fit on another card predicts that card's steps
    h100.write_text(json.dumps({**json.loads(baseline.read_text()), "summary": {"device": "NVIDIA H100 80GB HBM3"}}))
    with pytest.raises(InputError, match="h100.json: measured on NVIDIA H100 80GB HBM3, and this replay runs on cpu"):
        replay.run(_from_profile(tiny, lengths_file, h100))
    rank8 = tmp_path / "rank8.json"  # a fit through another LoRA rank predicts another step
    rank8.write_text(json.dumps({**json.loads(baseline.read_text()), "config": {"lora_rank": 8}}))
    with pytest.raises(InputError, match=r"rank8.json: measured through another step than this replay's \(profile vs"):
        replay.run(_from_profile(tiny, lengths_file, rank8))
    stack_file = carrier_json(tmp_path / "carrier.json", tiny.name, {"baseline": 0.4, "compile": 0.3})
    config = dataclasses.replace(_from_profile(tiny, lengths_file, stacked, variant="compile"), stack_json=stack_file)
    with pytest.raises(InputError, match="measured with variant 'compile'; --stack-json scales a baseline profile"):
        replay.run(config)
    # a stack measured through another LoRA rank: its saving is another step's
    lora8 = carrier_json(tmp_path / "c8.json", tiny.name, {"baseline": 0.4, "compile": 0.3}, setup={"lora_rank": 8})
    config = dataclasses.replace(_from_profile(tiny, lengths_file, baseline, variant="compile"), stack_json=lora8)
    with pytest.raises(
        InputError,
        match=r"c8.json: measured through another step than this replay's \(stack vs replay\): lora_rank 8 vs ",
    ):
        replay.run(config)
