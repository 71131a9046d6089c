"""Quiet output: same-cause failures are one line (the sweep's end and the answers' notes), and a probe's
table leaves out columns no row has a value in (`carrier --steps 0`)."""

from __future__ import annotations

import json

from runner.cli import main
from runner.cli.sweep import failure_lines
from runner.lab.plan import Job


def _job(n: int, host: str = "gx10") -> Job:
    return Job(
        plan="p",
        entry=0,
        probe="carrier",
        checkpoint=f"ck{n}",
        host=host,
        corpus=None,
        config={},
        config_hash="c",
        gpu=True,
        paths={},
    )


def test_28_failures_of_one_cause_print_one_line_naming_a_few():
    cause = "no alive Ray node carries labprobe.host=gx10"
    failures = [(_job(n), cause) for n in range(28)] + [(_job(99, "ana-ml2"), "timed out after 3600 s")]
    lines = failure_lines(failures)
    assert lines == [
        f"  failed, 28 jobs: {cause} (carrier ck0 @ gx10, carrier ck1 @ gx10, carrier ck2 @ gx10 and 25 more)",
        "  failed: carrier ck99 @ ana-ml2: timed out after 3600 s",
    ]


def test_carrier_steps_0_leaves_out_columns_without_values(tmp_path, capsys):
    ck = tmp_path / "tiny"
    ck.mkdir()
    config = {
        "model_type": "qwen3",
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "head_dim": 16,
        "num_hidden_layers": 2,
        "vocab_size": 128,
    }
    (ck / "config.json").write_text(json.dumps(config))
    assert main(["probe", "carrier", "--checkpoint", str(ck), "--weights", "random", "--steps", "0"]) == 0
    table = capsys.readouterr().out.split("\n\n")[0]
    header = table.splitlines()[1].split()
    assert header == [
        "model",
        "variant",
        "params_total",
        "params_trainable",
        "tokens_per_step",
        "params_active",
        "status",
    ]
    assert "None" not in table
