"""A GPU probe's job records the harness it measured through in its environment (path, source hash,
peft version, optimizer, autocast dtype, fallbacks), so compare can tell a harness change from a host's."""

from __future__ import annotations

import hashlib
import pickle
import subprocess
import sys
from pathlib import Path

import probes.step.harness
from runner.dispatch.launch import execute
from runner.lab.plan import Job


def test_a_carrier_jobs_environment_names_its_harness(tmp_path):
    from transformers import Qwen3Config

    Qwen3Config(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=128,
        num_hidden_layers=2,
    ).save_pretrained(tmp_path)
    job = Job(
        plan="p",
        entry=0,
        probe="carrier",
        checkpoint="tiny",
        host="local",
        corpus=None,
        config={"steps": 0, "lora_rank": 2},
        config_hash="c",
        gpu=False,
        paths={"checkpoint": str(tmp_path), "weights": "random"},
    )
    outcome = execute(job)
    assert outcome.status == "ok", outcome.reason
    source = Path(probes.step.harness.__file__).read_bytes()
    assert outcome.env["harness"] == "probes.step.harness"
    assert outcome.env["harness_sha256"] == hashlib.sha256(source).hexdigest()[:16]
    assert outcome.env["harness_autocast_dtype"] == "torch.bfloat16" and outcome.env["peft"]
    assert outcome.env["harness_fallbacks"] == "train_step" and "torch" in outcome.env


def test_an_outcome_unpickles_without_torch():
    """The sweep's driver unpickles each job's outcome: a torch object in it (torch.__version__ is a TorchVersion)
    imports torch there, ~2 CPU-s a sweep for a version string. Unpickled in a fresh process, which says whether
    that imported torch."""
    from probes.step.train import contract
    from runner.hosts.jobenv import collect_env

    data = pickle.dumps([collect_env(), contract.fingerprint(probes.step.harness)])
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.strip() == b"False", out.stderr[-2000:]


def test_the_rows_a_driver_unpickles_need_no_torch():
    """A mask job's real outcome, and the rows goodput and replay store, built through their probe modules (which
    import torch): those three probes' row classes live in torch-free rows modules, so the driver unpickling them does
    not import torch (~2 CPU-s a sweep with a mask job, before the rows moved). carrier's and profile's rows still
    import it: their jobs run on GPU hosts, whose driver pays it once a sweep."""
    from probes.goodput import probe as goodput
    from probes.replay import probe as replay

    demo = Path(__file__).resolve().parents[3] / "demo" / "checkpoints" / "qwen3-0.6b-base"
    job = Job(
        plan="p", entry=0, probe="mask", checkpoint="qwen3-0.6b-base", host="local", corpus=None,
        config={"seq_len": 64}, config_hash="c", gpu=False, paths={"checkpoint": str(demo)},
    )  # fmt: skip
    outcome = execute(job)
    assert outcome.status == "ok" and outcome.result.tables["layers"], outcome.reason
    numbers = dict(real_tokens=1, padded_tokens=1, bucket_size=None, strategy="s")
    rows = [
        goodput.Budget(tokens_per_job=1),
        goodput.GoodputRow(
            **numbers, num_batches=1, pad_fraction=0.0, epoch_s=1.0, goodput_tok_per_s=1.0, num_shapes=1,
            new_shapes_s=0.0, outside_fit_time_pct=0.0, hours_per_job=1.0, hours_sweep=1.0,
        ),
        replay.ReplayRow(
            **numbers, num_steps=1, predicted_s=1.0, measured_s=1.0, error_pct=0.0, predicted_tok_per_s=1.0,
            measured_tok_per_s=1.0,
        ),
        replay.StepRow(
            strategy="s", step=0, rows=1, width=1, real_tokens=1, masked=False, new_shape=True, predicted_s=1.0,
            measured_s=1.0,
        ),
    ]  # fmt: skip
    code = "import pickle, sys; pickle.loads(sys.stdin.buffer.read()); print('torch' in sys.modules)"
    data = pickle.dumps([outcome, rows])
    out = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True, check=True)
    assert out.stdout.strip() == b"False", out.stderr[-2000:]
