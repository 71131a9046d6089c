"""The GPU queue tests' stand-in probe (tests/helpers/gpu_queue_driver.py): what those tests check is where and when
a job runs and what its row records, through the real `execute` (the guard, the CUDA check, the host's versions),
not what the probe measures. A real probe's own work costs a fresh Ray worker ~5 CPU-s more (mask at 64 tokens
imports transformers' masking and dynamo), and every GPU job takes a fresh worker; this one reads the checkpoint's
config and returns one row. Registered through the documented hook: LABPROBE_PROBES=standin_probe, this folder on
the nodes' PYTHONPATH."""

from __future__ import annotations

import dataclasses
import gc
import json
from pathlib import Path

from probes import Check, ProbeResult, ProbeSpec


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    checkpoint: Path
    """The checkpoint (filled by the runner per job)."""


@dataclasses.dataclass(frozen=True)
class Row:
    model_type: str
    layers: int


def run(config: Config) -> ProbeResult:
    text = json.loads((Path(config.checkpoint) / "config.json").read_text())
    row = Row(model_type=text["model_type"], layers=int(text["num_hidden_layers"]))
    return ProbeResult(
        probe="standin",
        config=config,
        tables={"rows": [row]},
        # what the runner froze out of the collector before this run (runner.hosts.jobenv.spare_collector)
        summary={"layers": row.layers, "frozen_objects": gc.get_freeze_count()},
        checks=[Check(name="config_read", ok=True, detail=row.model_type)],
    )


SPEC = ProbeSpec(name="standin", module="standin_probe", settles="the GPU queue tests' stand-in: a checkpoint's config")
