"""`profile --variant`: the step at the production shape under each variant, each in its own fresh
process (probes.step.processes), with the what-if table and the advice (probes.step.whatif). Carrier
measures the same way per checkpoint; this is the one-checkpoint view beside profile's fit."""

from __future__ import annotations

import dataclasses
import json

from probes.profile.config import Config
from probes.step import kernels, processes, stacks, whatif
from probes.step.timing import MAX_SPREAD
from probes.step.worker import Spec


@dataclasses.dataclass(frozen=True, kw_only=True)
class VariantRow:
    variant: str
    tokens: int
    processes: int | None = None
    step_s: float | None = None
    tok_per_s: float | None = None
    spread_pct: float | None = None
    spread_across_pct: float | None = None
    """The baseline only: (max-min)/median of its processes' medians."""
    peak_mem_bytes: int | None = None
    gpu_busy_frac: float | None = None
    launch_bound: bool | None = None
    trustworthy: bool | None = None
    attention_backends: str | None = None
    compile_s: float | None = None
    caveat: str = ""
    status: str = "ok"


def _row(tokens: int, r: dict) -> VariantRow:
    base = dict(variant=r["variant"], tokens=tokens, caveat=r.get("caveat", ""))
    if r.get("status") != "ok":
        return VariantRow(**base, status=r.get("status", "failed"))
    busy, across = r.get("gpu_busy_frac"), r.get("spread_across_pct")
    return VariantRow(
        **base,
        processes=r.get("processes", 1),
        step_s=r["step_s"],
        tok_per_s=tokens / r["step_s"],
        spread_pct=r["spread_pct"],
        spread_across_pct=across,
        peak_mem_bytes=r.get("peak_mem_bytes"),
        gpu_busy_frac=busy,
        launch_bound=None if busy is None else busy < kernels.LAUNCH_BOUND_BELOW,
        trustworthy=r["trustworthy"] and (across is None or across <= 100 * MAX_SPREAD),
        attention_backends=",".join(r.get("attention_backends", [])) or None,
        compile_s=r.get("compile_s"),
    )


def measure(config: Config) -> tuple[list[VariantRow], list[whatif.WhatIfRow], list[str], str]:
    """(variants rows, whatif rows, advice, evidence JSON) for config.variant at the production shape."""
    names = stacks.parse(config.variant)
    spec = Spec.of(config, config.checkpoint, profile_steps=config.profile_steps)
    baseline, others = processes.measure_set(spec, names, config.processes)
    tokens = config.batch_size * config.seq_len
    baseline["tokens_per_step"] = tokens
    name = config.checkpoint.name
    evidence = {k: baseline.get(k) for k in ("process_step_s", "attributed_s", "microbench", "kernel_table")}
    return (
        [_row(tokens, r) for r in (baseline, *others)],
        whatif.table(name, baseline, others),
        whatif.advice(name, baseline, others, baseline.get("spread_across_pct")),
        json.dumps(evidence, indent=1),
    )
