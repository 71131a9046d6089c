"""A carrier result as `labprobe probe carrier --json` writes it, with only what goodput and replay read
from it (table `carriers`: model, variant, step_s, tokens_per_step, trustworthy, status; `numerics`)."""

from __future__ import annotations

import json
from pathlib import Path


def carrier_json(
    path: Path,
    model: str,
    steps: dict[str, float],
    *,
    trustworthy: bool = True,
    shape: tuple[int, int] | None = None,
    setup: dict | None = None,
) -> Path:
    """steps: variant name -> step_s (None: a row that did not measure, e.g. not applicable); shape: the run's
    (batch_size, seq_len), in its config as carrier writes it (None: no config, as in a hand-made file); setup:
    more of the config (harness, lora_rank, ce_chunk)."""
    rows = [
        {
            "model": model,
            "variant": name,
            "step_s": step_s,
            "tokens_per_step": 4096,
            "trustworthy": trustworthy if step_s is not None else None,
            "status": "ok" if step_s is not None else "not applicable: install liger-kernel",
        }
        for name, step_s in steps.items()
    ]
    numerics = [{"model": model, "variant": name, "within_tolerance": name != "bf16-adapters"} for name in steps]
    config = {} if shape is None else {"batch_size": shape[0], "seq_len": shape[1]}
    config = {"config": config | (setup or {})} if config or setup else {}
    path.write_text(json.dumps({"probe": "carrier", **config, "tables": {"carriers": rows, "numerics": numerics}}))
    return path
