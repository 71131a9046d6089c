"""`profile --variant`: the step at the production shape under each variant, each in its own fresh
process (probes.step.variants.processes), with the what-if table and the advice (probes.step.variants.whatif). Carrier
measures the same way per checkpoint; this is the one-checkpoint view beside profile's fit."""

from __future__ import annotations

import dataclasses
import json

from probes.profile.config import Config
from probes.step.measure import kernels
from probes.step.measure.timing import MAX_SPREAD
from probes.step.variants import processes, whatif
from probes.step.variants.measurement import Measurement, Spec


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


def _row(tokens: int, r: Measurement) -> VariantRow:
    base = dict(variant=r.variant.name, tokens=tokens, caveat=r.caveat)
    if r.status != "ok":
        return VariantRow(**base, status=r.status)
    busy, across = r.gpu_busy_frac, r.spread_across_pct
    return VariantRow(
        **base,
        processes=r.processes,
        step_s=r.step_s,
        tok_per_s=tokens / r.step_s,
        spread_pct=r.spread_pct,
        spread_across_pct=across,
        peak_mem_bytes=r.peak_mem_bytes,
        gpu_busy_frac=busy,
        launch_bound=None if busy is None else busy < kernels.LAUNCH_BOUND_BELOW,
        trustworthy=r.trustworthy and (across is None or across <= 100 * MAX_SPREAD),
        attention_backends=",".join(r.attention_backends or []) or None,
        compile_s=r.compile_s,
    )


def measure(config: Config) -> tuple[list[VariantRow], list[whatif.WhatIfRow], list[str], str]:
    """(variants rows, whatif rows, advice, evidence JSON) for config.variant at the production shape."""
    spec = Spec.of(config, config.checkpoint, profile_steps=config.profile_steps)
    baseline, others = processes.measure_set(spec, config.resolved_variants, config.processes)
    tokens = config.batch_size * config.seq_len
    name = config.checkpoint.name
    evidence = {k: getattr(baseline, k) for k in ("process_step_s", "attributed_s", "microbench", "kernel_table")}
    return (
        [_row(tokens, r) for r in (baseline, *others)],
        whatif.table(name, baseline, others),
        whatif.advice(name, baseline, others, baseline.spread_across_pct, tokens),
        json.dumps(evidence, indent=1),
    )
