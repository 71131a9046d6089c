"""A GPU probe's job records the harness it measured through in its environment (path, source hash,
peft version, optimizer, autocast dtype, fallbacks), so compare can tell a harness change from a host's."""

from __future__ import annotations

import hashlib
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
