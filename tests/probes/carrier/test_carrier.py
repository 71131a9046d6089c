"""carrier: parameter counts against a count by hand, the projections recomputed from the row, the
FLOP formula by hand, an OOM as a row, bad input refused by name, --checkpoint repeatable."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import Qwen3Config

from probes.carrier import answer
from probes.carrier import probe as carrier
from probes.result import InputError
from probes.step.measure import flops
from probes.step.train import models
from runner.cli import main

H, I, HEADS, KV, D, LAYERS, VOCAB = 48, 80, 3, 1, 16, 2, 300


@pytest.fixture(scope="module")
def family(tmp_path_factory) -> tuple[Path, Path]:
    tied, untied = tmp_path_factory.mktemp("tied"), tmp_path_factory.mktemp("untied")
    for path, tie in ((tied, True), (untied, False)):
        Qwen3Config(
            hidden_size=H,
            intermediate_size=I,
            num_attention_heads=HEADS,
            num_key_value_heads=KV,
            head_dim=D,
            vocab_size=VOCAB,
            num_hidden_layers=LAYERS,
            tie_word_embeddings=tie,
        ).save_pretrained(path)
    return tied, untied


def linear_shapes() -> list[tuple[int, int]]:
    """(in, out) of the seven projections of one Qwen3 layer."""
    return [(H, HEADS * D), (H, KV * D), (H, KV * D), (HEADS * D, H), (H, I), (H, I), (I, H)]


def base_params(tied: bool) -> int:
    per_layer = sum(i * o for i, o in linear_shapes()) + 2 * H + 2 * D  # two RMSNorms, q/k norms
    return VOCAB * H * (1 if tied else 2) + LAYERS * per_layer + H  # embedding (+ lm_head), final norm


@pytest.mark.parametrize("rank", [1, 8])
def test_counts_only_equal_a_count_by_hand(family, rank):
    result = carrier.run(carrier.Config(checkpoint=family, lora_rank=rank, steps=0))
    lora = LAYERS * sum(rank * (i + o) for i, o in linear_shapes())
    tied, untied = result.tables["carriers"]
    assert (tied.params_trainable, untied.params_trainable) == (lora, lora)
    assert tied.params_total == base_params(True) + lora
    assert untied.params_total == base_params(False) + lora
    assert tied.step_s is None and result.summary["device"] == "meta"


def test_step_flops_by_hand(family):
    model = models.build_model(family[0], weights="random", device=torch.device("meta"))
    from probes.step import harness

    model = models.with_lora(model, harness, rank=4, alpha=8)
    shape = flops.model_shape(model)
    assert shape.num_base_linear == LAYERS * sum(i * o for i, o in linear_shapes()) + VOCAB * H  # lm_head runs
    assert shape.num_lora == LAYERS * sum(4 * (i + o) for i, o in linear_shapes())
    b, n = 3, 20
    expected = 4 * b * n * shape.num_base_linear + 6 * b * n * shape.num_lora + 6 * LAYERS * b * n * n * HEADS * D
    assert flops.step_flops(shape, batch_size=b, seq_len=n) == expected


def test_a_cpu_run_and_its_projections(family):
    config = carrier.Config(
        checkpoint=family,
        weights="random",
        lora_rank=4,
        seq_len=16,
        batch_size=2,
        warmup_steps=1,
        steps=2,
        max_steps=3,
        token_budget=10**6,
        num_arms=3,
        num_seeds=2,
        peak_tflops=0.5,
        device="cpu",
        processes=1,
        numerics_steps=0,  # not read here: the numerics are test_a_stage_after_the_timing_out_of_memory's
    )
    result = carrier.run(config)
    for row in result.tables["carriers"]:
        assert row.variant == "baseline" and row.tokens_per_step == 32 and row.steps == 2
        assert row.tok_per_s == pytest.approx(32 / row.step_s)
        # a job pays every step: hours from the mean of all timed steps, not the median's quiet window
        assert row.hours_per_job == pytest.approx(10**6 * row.mean_step_s / 32 / 3600)
        assert row.mean_step_s >= row.step_s * 0.5 and row.hours_sweep == pytest.approx(row.hours_per_job * 6)
        assert row.gpu_busy_frac is None and row.launch_bound is None  # CPU: no device timeline
        assert row.trustworthy is False  # a window of 2 steps says nothing about its spread
        assert row.status == (
            "ok" if row.trustworthy else "not trustworthy (spread above 2%): mfu and hours are not trustworthy"
        )
    shape_flops = (
        4 * 32 * (LAYERS * sum(i * o for i, o in linear_shapes()) + VOCAB * H)
        + 6 * 32 * LAYERS * sum(4 * (i + o) for i, o in linear_shapes())
        + 6 * LAYERS * 2 * 16 * 16 * HEADS * D
    )
    first = result.tables["carriers"][0]
    assert first.mfu_vs_measured_peak == pytest.approx(shape_flops / first.step_s / 0.5e12)
    assert first.mfu_vs_datasheet_peak is None  # no datasheet for a CPU
    assert "given: 0.5 TFLOP/s" in result.summary["peak"]
    evidence = json.loads(result.artifacts["evidence.json"])
    assert list(evidence) == [family[0].name, family[1].name]
    for row, name in zip(result.tables["carriers"], evidence):
        timing = evidence[name]["baseline"]["timings"]
        # every timed step after warm-up (the worker's first call is warm-up, timed apart)
        timed = np.array(timing["raw_s"][timing["num_warmup_configured"] :])
        assert row.spread_all_pct == pytest.approx(100 * np.ptp(timed) / np.median(timed))
    checks = {c.name: c for c in result.checks}
    assert checks["rows_trustworthy"].ok == all(r.trustworthy for r in result.tables["carriers"])


def test_an_oom_is_a_row_and_the_family_goes_on(family, lab_path, monkeypatch):
    """tests/data/harness_oom.py raises CUDA's own OutOfMemoryError: at LoRA for the tied model, in
    the step for the untied one. Each is a row with its stage; the family is measured to the end."""
    monkeypatch.setenv("LABPROBE_TEST_OOM_AT_LOAD", "True")
    result = carrier.run(
        carrier.Config(
            checkpoint=family,
            weights="random",
            lora_rank=2,
            seq_len=8,
            warmup_steps=0,
            steps=1,
            max_steps=1,
            device="cpu",
            processes=1,
            harness="harness_oom",
        )
    )
    tied, untied = result.tables["carriers"]
    assert tied.status.startswith("oom while loading: CUDA out of memory") and tied.step_s is None
    assert untied.status.startswith("oom while timing: CUDA out of memory") and untied.step_s is None
    assert untied.params_trainable > 0  # counted before the step ran out of memory
    check = {c.name: c for c in result.checks}["all_measured"]
    assert not check.ok and family[0].name in check.detail and family[1].name in check.detail


def test_a_baseline_out_of_memory_beside_a_stack_that_fits_is_a_row_not_a_traceback(
    family, lab_path, monkeypatch, capsys
):
    """The 4B's baseline at 6 x 2,048 ran out of memory on an H100 where its bf16-adapters stack fit: the
    settings divided by the baseline's missing step time and the whole carrier died with a TypeError."""
    monkeypatch.setenv("LABPROBE_TEST_OOM_FP32_ADAPTERS", "1")
    measured = []  # the printed and the --json output of one config: measured once, shown both ways
    real_run = carrier.run

    def run_once(config):
        for seen, result in measured:
            if seen == config:
                return result
        measured.append((config, real_run(config)))
        return measured[-1][1]

    monkeypatch.setattr(carrier, "run", run_once)
    argv = ["probe", "carrier", "--checkpoint", str(family[0]), "--weights", "random", "--lora-rank", "2"]
    argv += ["--seq-len", "8", "--warmup-steps", "0", "--steps", "1", "--max-steps", "1", "--device", "cpu"]
    argv += ["--processes", "1", "--harness", "harness_oom", "--variant", "bf16-adapters", "--numerics-steps", "2"]
    assert main(argv) == 1  # a row did not measure: all_measured fails
    printed = capsys.readouterr().out
    assert main([*argv, "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    rows = {r["variant"]: r for r in result["tables"]["carriers"]}
    assert rows["baseline"]["status"].startswith("oom while timing") and rows["bf16-adapters"]["step_s"] > 0
    head, *_, within = result["summary"]["settings"]
    assert head.endswith(
        "fastest bf16-adapters (the baseline did not measure: its speed-up is unknown) (numerics not measured: "
        "the baseline did not measure, nothing to compare with)"
    ), head
    assert within == "fastest within the numerics tolerance: not measured (the baseline did not measure)"
    fp32_only = [a if a != "bf16-adapters" else "fused-adamw" for a in argv]  # every row out of memory
    assert main([*fp32_only, "--json"]) == 1
    settings = json.loads(capsys.readouterr().out)["summary"]["settings"]
    assert settings[0] == f"{family[0].name}: nothing measured, no change to advise", settings
    assert head in printed and "oom while timing" in printed
    assert len(measured) == 2


def test_a_stage_after_the_timing_out_of_memory_keeps_the_step_time_and_says_what_is_missing(family, lab_path):
    """tests/data/harness_late_oom.py times its step, then runs out of memory building the numerics' and the
    micro-benchmarks' optimizers: the row keeps its step time, and the numerics and the what-if say why."""
    config = carrier.Config(checkpoint=(family[0],), weights="random", lora_rank=2, seq_len=8, warmup_steps=0,
                            steps=1, max_steps=1, device="cpu", processes=1, harness="harness_late_oom",
                            variant=("bf16-adapters",), numerics_steps=2)  # fmt: skip
    result = carrier.run(config)
    rows = {r.variant: r for r in result.tables["carriers"]}
    assert all("oom" not in r.status and r.step_s > 0 for r in rows.values()), rows
    assert rows["bf16-adapters"].not_measured == "numerics: oom: CUDA out of memory. Tried to allocate 3.00 GiB"
    assert (
        rows["baseline"].not_measured.startswith("numerics: oom: ")
        and "micro-benchmarks: oom" in rows["baseline"].not_measured
    )
    check = {c.name: c for c in result.checks}["all_measured"]
    assert check.ok and "after the timing, not measured: tied0/baseline's numerics: oom" in check.detail
    _, notes = answer.figures({"carriers": pd.DataFrame([dataclasses.asdict(r) for r in rows.values()])}, {}, {})
    assert "tied0/bf16-adapters: timed, then not measured: numerics: oom: CUDA out of memory." in " ".join(notes)
    numerics = {r.variant: r for r in result.tables["numerics"]}
    assert numerics["bf16-adapters"].within_tolerance is None
    assert numerics["bf16-adapters"].basis == "not measured: oom: CUDA out of memory. Tried to allocate 3.00 GiB"
    whatif = {r.variant: r for r in result.tables["whatif"]}["bf16-adapters"]
    assert whatif.basis.startswith("not predicted: the baseline's micro-benchmarks did not run (oom: CUDA")
    assert result.summary["settings"][-1] == "fastest within the numerics tolerance: not measured"
    assert "(numerics not measured: oom: CUDA out of memory" in result.summary["settings"][0]
    (advice,) = [line for line in result.summary["advice"] if " bf16-adapters: " in line]
    assert advice.endswith("; numerics not measured: oom: CUDA out of memory. Tried to allocate 3.00 GiB"), advice


def test_a_checkpoint_without_config_is_refused_before_anything_runs(family, tmp_path):
    with pytest.raises(InputError, match=str(tmp_path)):
        carrier.run(carrier.Config(checkpoint=(family[0], tmp_path), steps=0))


def test_checkpoint_is_repeatable_on_the_cli(family, capsys):
    code = main(
        [
            "probe",
            "carrier",
            "--checkpoint",
            str(family[0]),
            "--checkpoint",
            str(family[1]),
            "--steps",
            "0",
            "--lora-rank",
            "2",
            "--json",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert [r["model"] for r in out["tables"]["carriers"]] == [family[0].name, family[1].name]
    assert main(["probe", "carrier", "--checkpoint", str(family[0]), "--steps", "-1"]) == 2


def test_weights_load_from_a_local_checkpoint_or_are_refused_by_name(family, tmp_path):
    from transformers import AutoModelForCausalLM

    saved = tmp_path / "saved"
    AutoModelForCausalLM.from_config(Qwen3Config.from_pretrained(family[0])).save_pretrained(saved)
    result = carrier.run(
        carrier.Config(
            checkpoint=(saved,),
            weights="checkpoint",
            lora_rank=2,
            seq_len=8,
            processes=1,
            warmup_steps=0,
            steps=1,
            max_steps=1,
            device="cpu",
            numerics_steps=0,
        )
    )
    assert result.tables["carriers"][0].step_s > 0
    with pytest.raises(InputError, match="--weights random"):  # config.json only: no weights to load
        carrier.run(
            carrier.Config(
                checkpoint=(family[0],), weights="checkpoint", steps=1, max_steps=1, processes=1, device="cpu"
            )
        )


@pytest.mark.parametrize("probe", ["carrier", "profile"])
def test_help_renders_every_documented_option(probe, capsys):
    assert main(["probe", probe, "--help"]) == 0
    out = capsys.readouterr().out
    assert "--max-steps" in out and "--harness" in out and "--weights" in out


def test_no_row_column_is_named_like_a_store_key_column():
    """A row column named like a key (the old `checkpoint`) is renamed by the store (row_checkpoint):
    the family member is `model`."""
    from dataclasses import fields

    from runner.store.store import KEY_COLUMNS

    assert not {f.name for f in fields(carrier.CarrierRow)} & set(KEY_COLUMNS)
    assert "model" in {f.name for f in fields(carrier.CarrierRow)}


@pytest.mark.parametrize(
    "option, value, needle",
    [
        ("--device", "bogus", "--device 'bogus'"),
        ("--device", "cuda:x", "--device 'cuda:x'"),
        ("--ce-chunk", "0", "--ce-chunk must be >= 1"),
        ("--ce-chunk", "-5", "--ce-chunk must be >= 1"),
        ("--lora-alpha", "nan", "--lora-alpha"),
        ("--lora-alpha", "-1", "--lora-alpha"),
    ],
)
@pytest.mark.parametrize("probe", ["carrier", "profile"])
def test_shared_gpu_options_are_checked_before_any_work(capsys, probe, option, value, needle):
    checkpoint = Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "qwen3-0.6b-base"
    assert main(["probe", probe, "--checkpoint", str(checkpoint), "--weights", "random", option, value]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err


def test_checks_are_not_ok_on_nothing_measured_and_claim_no_gpu_bound_on_a_cpu():
    counts = dict(model="m", variant="baseline", params_total=10, params_trainable=1, tokens_per_step=32)
    failed = carrier.CarrierRow(**counts, status="oom while timing: CUDA out of memory")
    cpu = carrier.CarrierRow(**counts, step_s=0.5, trustworthy=True, launch_bound=None)
    config = carrier.Config(checkpoint=(Path("m"),), steps=2)
    nothing = {c.name: c for c in carrier._checks(config, [failed])}
    assert not nothing["rows_trustworthy"].ok and not nothing["fast_kernels"].ok
    detail = {c.name: c for c in carrier._checks(config, [cpu])}["rows_trustworthy"].detail
    assert "GPU-bound" not in detail and "launch-bound unknown" in detail


def test_rows_are_measured_as_asked_reproduced_and_a_bad_fill_is_one_line(family, capsys):
    argv = ["probe", "carrier", "--checkpoint", str(family[0]), "--weights", "random", "--lora-rank", "2"]
    argv += ["--seq-len", "8", "--warmup-steps", "0", "--steps", "2", "--max-steps", "2", "--device", "cpu"]
    argv += ["--processes", "1", "--variant", "bf16-adapters", "--numerics-steps", "1"]
    first_loss = {}
    for rows in ("full", "packed"):
        main([*argv, "--rows", rows, "--json"])
        result = json.loads(capsys.readouterr().out)
        assert result["config"]["rows"] == rows and all(r["step_s"] > 0 for r in result["tables"]["carriers"])
        first_loss[rows] = {r["variant"]: r["loss_first"] for r in result["tables"]["numerics"]}["baseline"]
    # the fill reached the worker processes: positions restarting at each sequence change the first loss
    assert first_loss["full"] != pytest.approx(first_loss["packed"], rel=1e-6)
    # the reproducing command carries the fill, whichever of the two measured fastest on this machine
    reproduce = [line for line in result["summary"]["settings"] if "reproduce:" in line]
    assert len(reproduce) == 1 and "--rows packed --variant " in reproduce[0]
    assert main([*argv, "--rows", "ragged"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "rows" in err and "full, packed" in err
