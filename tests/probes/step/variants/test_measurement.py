"""The variant's round trip: resolved once from the command line's names, carried as a Variant in the Spec,
sent to the worker by its canonical name, resolved there, and back as a Measurement holding the parent's
own Variant; an answer that does not read is a failed Measurement, never a crash."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from probes.carrier.config import Config
from probes.result import FieldError, InputError
from probes.step.variants import catalog, processes, stacks
from probes.step.variants.measurement import Measurement, Spec

STEP = dict(weights="random", lora_rank=4, seq_len=16, batch_size=2, warmup_steps=1, steps=2, max_steps=2, device="cpu")


def _spec(checkpoint: Path, variant: catalog.Variant) -> Spec:
    return Spec(checkpoint=str(checkpoint), harness="probes.step.harness", lora_alpha=8.0, ce_chunk=8, variant=variant,
                **{k: v for k, v in STEP.items() if k != "device"}, device="cpu")  # fmt: skip


def test_the_config_resolves_its_variants_once_and_pickles_without_them():
    config = Config(checkpoint=(Path("x"),), variant=("fused-adamw+compile", "bf16-autocast", "compile+fused-adamw"))
    chosen = config.resolved_variants
    assert [v.name for v in chosen] == ["baseline", "compile+fused-adamw", "bf16-autocast"]
    assert chosen[1] == stacks.compose("compile+fused-adamw") and chosen[1].compile and chosen[1].fused_adamw
    assert config.resolved_variants is chosen  # resolved at construction, not again
    back = pickle.loads(pickle.dumps(config))  # a Ray task's result holds its Config
    assert back == config and "resolved_variants" not in vars(back)
    assert back.resolved_variants == chosen
    with pytest.raises(FieldError, match="'turbo': unknown"):
        Config(checkpoint=(Path("x"),), variant=("turbo",))


@pytest.mark.parametrize("name", ["ce-chunk=8+fused-adamw+grad-ckpt", "variants_lab:ZERO_GRAD", "baseline"])
def test_a_spec_crosses_to_the_worker_by_the_variants_name_and_resolves_to_the_same_object(name, lab_path):
    spec = _spec(Path("ckpt"), stacks.get(name))
    sent = json.loads(spec.to_json())
    assert sent["variant"] == spec.variant.name and sent["ce_chunks"] == []
    assert Spec.from_json(spec.to_json()) == spec
    with pytest.raises(FieldError, match="'turbo'"):
        Spec.from_json(json.dumps({**sent, "variant": "turbo"}))


def test_the_workers_answer_reads_back_as_a_measurement_of_the_same_variant(tiny, tmp_path):
    stack = stacks.get("grad-ckpt+fused-adamw")
    spec = _spec(tiny, stack)
    (tmp_path / "spec.json").write_text(spec.to_json())
    subprocess.run(
        [sys.executable, "-m", "probes.step.variants.worker", "spec.json", "out.json"], cwd=tmp_path, check=True
    )
    text = (tmp_path / "out.json").read_text()
    assert json.loads(text)["variant"] == "fused-adamw+grad-ckpt"
    m = Measurement.from_json(text, stack)
    assert m.variant is stack and m.status == "ok" and m.caveat == stack.caveat
    assert m.step_s > 0 and m.steps == 2 and m.harness_step["gradient_checkpointing"] is True
    assert m.optimizer == m.harness_step["optimizer_class"] == "AdamW (fused)"
    assert Measurement.from_json(m.to_json(), stack) == m
    assert Measurement.from_json(text, catalog.get("fused-adamw")).status.startswith(
        "failed: unreadable answer: it names variant 'fused-adamw+grad-ckpt', not 'fused-adamw'"
    )


@pytest.mark.parametrize(
    "text, why",
    [
        ("{not json", "unreadable answer: Expecting property name"),
        ("[1, 2]", "unreadable answer: a JSON list, not an object"),
        ('{"variant": "compile", "step_s": 0.5, "tok_per_s": 9}', "unreadable answer: unknown key(s) tok_per_s"),
        ('{"variant": "compile", "step_s": "fast"}', "unreadable answer: step_s is a str, not a float"),
        ('{"variant": "compile", "status": null}', "unreadable answer: status is null"),
        ('{"variant": "compile", "timings": [0.5]}', "unreadable answer: timings is a list, not a dict"),
        ('{"variant": "compile", "step_s": true}', "unreadable answer: step_s is a bool, not a float"),
        ('{"variant": "compile", "processes": false}', "unreadable answer: processes is a bool, not a int"),
    ],
)
def test_an_answer_that_does_not_read_is_a_failed_measurement(text, why):
    compile_ = catalog.get("compile")
    m = Measurement.from_json(text, compile_)
    assert m.status.startswith(f"failed: {why}")
    assert m == Measurement.failed(compile_, m.status.removeprefix("failed: "))  # nothing else read from it


def test_bad_input_found_by_the_child_is_the_parents_input_error(tmp_path):
    with pytest.raises(InputError, match="weights do not load"):
        Measurement.from_json('{"input_error": "weights do not load"}', catalog.BASELINE_VARIANT)
    with pytest.raises(InputError, match=str(tmp_path / "missing")):
        processes.run(_spec(tmp_path / "missing", catalog.get("compile")))


def test_a_child_that_dies_or_outlasts_its_time_is_a_failed_measurement_of_its_variant(tiny):
    unknown = catalog.Variant("made-up", "a Variant no name resolves to: the child dies reading its Spec")
    died = processes.run(_spec(tiny, unknown))
    assert died.variant is unknown and died.status.startswith("failed: exit 1: ") and "'made-up'" in died.status
    assert died.process_wall_s > 0 and died.step_s is None
    slow = processes.run(_spec(tiny, unknown), timeout_s=0.01)
    assert slow.variant is unknown and slow.status == "failed: timed out after 0 s"


@pytest.mark.parametrize("rows", ["full", "packed"])
def test_the_measured_batch_is_filled_as_its_rows_say(tiny, rows):
    """A stack saves less on masked rows (on an H100 packed rows replayed x0.479 where full rows measured
    x0.439): carrier --rows measures the fill the lab trains on. Full rows carry no mask; packed ones four sequences
    a row, positions restarting, every position a real token."""
    import dataclasses

    import torch

    from probes.step import harness as reference
    from probes.step.train import contract
    from probes.step.variants import worker

    spec = dataclasses.replace(_spec(tiny, catalog.BASELINE_VARIANT), rows=rows)
    pieces = contract.resolve(reference.load_harness(spec.harness))
    model = worker.build(spec, pieces, spec.variant, torch.device("cpu"))
    batch = worker.make_step(spec, model, pieces, spec.ce_chunk, torch.device("cpu")).micro_batches[0]
    assert batch["input_ids"].shape == (2, 16)
    if rows == "full":
        assert "position_ids" not in batch and "attention_mask" not in batch
    else:
        assert batch["position_ids"].tolist() == [[0, 1, 2, 3] * 4] * 2 and (batch["labels"] != -100).all()


@pytest.mark.parametrize("seq_len", [2, 3, 4, 5, 16, 4099])
def test_a_packed_row_fills_its_width_exactly(seq_len):
    from probes.step.train import models

    (row,) = {tuple(r) for r in models.row_fill("packed", 3, seq_len)["packed"]}
    assert sum(row) == seq_len and all(n >= 1 for n in row) and len(row) == min(4, seq_len)


def test_an_unknown_fill_is_refused_not_measured_as_full():
    from probes.step.train import models

    with pytest.raises(ValueError, match="rows must be one of full, packed, got 'padded'"):
        models.row_fill("padded", 1, 8)
