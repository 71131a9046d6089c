"""`carrier`: what each model of a family really delivers for LoRA training, and how far to trust it.

For every `--checkpoint` (repeatable: a family) and every `--variant` (repeatable; probes.step.variants.catalog),
one row of table `carriers`, named by `model` (the checkpoint directory's name; not `checkpoint`,
which is the store's job key) and `variant`: `params_total` (the base plus LoRA, a tied embedding
once), `params_active` (what one token uses: experts at top_k / num_experts; probes.step.train.params) and
`params_trainable` (LoRA), `tokens_per_step`, `warmup_steps` and `steps` (the timed window
the statistics use), `step_s` (median), `tok_per_s`, `spread_pct` ((max-min)/median over the window
the statistics use), `spread_all_pct` (over every timed step after warm-up: the window is chosen for
being quiet, so spread_pct is biased low), `iqr_pct` (interquartile range / median),
`spread_across_pct` (the baseline's, and a searched row's measured twice: (max-min)/median of the medians of
its fresh processes, the spread a rerun sees), `peak_mem_bytes`, `gpu_busy_frac` (kernel time from
torch.profiler over step time), MFU named by its peak (probes.step.measure.flops states the FLOP formula):
`mfu_vs_measured_peak` (a bf16 matmul on this GPU, or --peak-tflops) and `mfu_vs_datasheet_peak`
(989 TFLOP/s dense bf16 for an H100/H200 SXM; None for a device not listed), projected hours for
`--token-budget` tokens per job (`hours_per_job`, from `mean_step_s`, the mean of every timed step after
warm-up: a job pays its slow steps too, which the median's quiet window leaves out) and for `--num-arms` x `--num-seeds` jobs
(`hours_sweep`), `attention_backends` (read from the kernels that ran), `kernel_fallbacks` (kernels that fell back to
transformers' reference PyTorch code in the timed process: probes.step.measure.kernel_watch), `caveat` (what the variant
may change besides speed) and `compile_s`.

The measured batch is `--batch-size` rows of `--seq-len` tokens, filled as `--rows` says: full (no mask:
SDPA's causal fast path) or packed (four sequences a row, positions restarting: every position a real
token). A stack saves less on masked rows than on full ones: measure the fill the lab trains on.

Every measurement runs in its own fresh process with the same seed and data (probes.step.variants.processes):
the baseline in `--processes` of them (>= 2 by default), each other variant in one (a searched row whose steps
spread above 2%: in two, the steadier kept, probes.step.variants.search). A spread above
2% extends the timed steps up to --max-steps; `trustworthy` is False when a window still disagrees
by more than 2% or the processes do. A row whose GPU idles more than 10% of the step
(`gpu_busy_frac` < 0.9) is `launch_bound`: its number measures the host's CPU as much as its GPU.
Such rows and untrustworthy ones fail the check `rows_trustworthy` (exit 1) and their status says
their MFU and hours are not trustworthy. A row that ran a reference fallback fails `fast_kernels`,
which names what to install. The summary's `lora_targets` lists, per model, the decoder weights LoRA
adapted and those it did not (routers never; fused experts through PEFT's target_parameters). On the CPU (CI), gpu_busy_frac, launch_bound and MFU are
None: there is no device timeline to read. `--steps 0` reports parameter counts only, built on the
meta device in this process: no weights, no GPU. A CUDA out-of-memory (building the model, timing,
profiling) or a process that dies is a row with its reason, never a crash of the family.

Table `whatif` (probes.step.variants.whatif): per variant, the saving predicted from the baseline's attributed
profile before it is measured, the measured one, the error in percentage points and the peak memory
before and after. The summary ends with `advice`: the measured changes ranked by speed-up.

A `--variant` may be a stack, `a+b+c` (probes.step.variants.stacks: stored under its canonical name, a conflict
refused in one line). `--search` finds the fastest stack greedily (probes.step.variants.search: table `search`, each
stack predicted from the singles before measured; summary `search_best`, `search_stop`, `not_tried`).
Whenever something is compared with the baseline, table `numerics` gives each row's numerics price and
`within_tolerance` (probes.step.variants.numerics), the advice marks a change outside it, and summary `settings`
prints the fastest as the settings to make and the command reproducing it (probes.carrier.stack_report).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from probes.carrier import stack_report
from probes.carrier.config import Config
from probes.carrier.contract import CARRIERS
from probes.result import Check, ProbeResult
from probes.step import harness as reference
from probes.step.measure import flops, kernel_watch, kernels, peaks
from probes.step.measure.timing import MAX_SPREAD
from probes.step.train import contract, lora_targets, models, params
from probes.step.train.checkpoint import load_text_config, model_name
from probes.step.variants import catalog, whatif
from probes.step.variants.measurement import Measurement


@dataclasses.dataclass(frozen=True, kw_only=True)
class CarrierRow:
    model: str
    variant: str = catalog.BASELINE
    params_total: int | None
    params_trainable: int | None
    tokens_per_step: int
    params_active: int | None = None
    """Parameters one token uses: experts at top_k / num_experts, all else whole (probes.step.train.params);
    the step's FLOPs are charged on these."""
    warmup_steps: int | None = None
    steps: int | None = None
    processes: int | None = None
    step_s: float | None = None
    mean_step_s: float | None = None
    """Mean of every timed step after warm-up (all processes): what hours_per_job is priced from."""
    tok_per_s: float | None = None
    spread_pct: float | None = None
    spread_all_pct: float | None = None
    iqr_pct: float | None = None
    spread_across_pct: float | None = None
    peak_mem_bytes: int | None = None
    gpu_busy_frac: float | None = None
    mfu_vs_measured_peak: float | None = None
    mfu_vs_datasheet_peak: float | None = None
    hours_per_job: float | None = None
    hours_sweep: float | None = None
    trustworthy: bool | None = None
    launch_bound: bool | None = None
    attention_backends: str | None = None
    kernel_fallbacks: str | None = None
    """Kernels that fell back to transformers' reference PyTorch implementation in the timed process,
    `function (package)` (probes.step.measure.kernel_watch); None: every kernel took its fast path."""
    compile_s: float | None = None
    not_measured: str | None = None
    """Stages after the timing that ran out of memory, `numerics: oom: ...`: the step time stands, their
    figures (the numerics price, the what-if's micro-benchmarks) are missing."""
    caveat: str = ""
    status: str = "ok"


def _counts_only(config: Config, checkpoint: Path, harness, targets: dict) -> CarrierRow:
    """The row of `--steps 0`, built on the meta device; what LoRA targeted goes into `targets`."""
    model = models.build_model(checkpoint, weights="random", device=torch.device("meta"))
    model = models.with_lora(model, harness, rank=config.lora_rank, alpha=config.lora_alpha)
    total, trainable = models.count_params(model)
    targets[model_name(checkpoint)] = lora_targets.describe(model)
    return CarrierRow(
        model=model_name(checkpoint),
        params_total=total,
        params_trainable=trainable,
        params_active=round(params.count(model).params_active),
        tokens_per_step=config.batch_size * config.seq_len,
        status="counts only",
    )


def _row(config: Config, name: str, r: Measurement, peaks: tuple[float | None, float | None]) -> CarrierRow:
    tokens = config.batch_size * config.seq_len
    base = dict(
        model=name,
        variant=r.variant.name,
        params_total=r.params_total,
        params_trainable=r.params_trainable,
        params_active=r.params_active,
        tokens_per_step=tokens,
        caveat=r.caveat,
        kernel_fallbacks=", ".join(r.kernel_fallbacks or []) or None,
        not_measured="; ".join(f"{stage}: {why}" for stage, why in (r.not_measured or {}).items()) or None,
    )
    if r.status != "ok":
        return CarrierRow(**base, status=r.status)
    step_s, busy = r.step_s, r.gpu_busy_frac
    hours = config.token_budget * (r.mean_all_s or step_s) / tokens / 3600.0  # a job pays every step: the mean
    launch_bound = None if busy is None else busy < kernels.LAUNCH_BOUND_BELOW
    across = r.spread_across_pct
    trustworthy = r.trustworthy and (across is None or across <= 100 * MAX_SPREAD)
    mfu = [None if p is None else r.step_flops / step_s / p for p in peaks]
    return CarrierRow(
        **base,
        warmup_steps=r.warmup_steps,
        steps=r.steps,
        processes=r.processes,
        step_s=step_s,
        mean_step_s=r.mean_all_s,
        tok_per_s=tokens / step_s,
        spread_pct=r.spread_pct,
        spread_all_pct=r.spread_all_pct,
        iqr_pct=r.iqr_pct,
        spread_across_pct=across,
        peak_mem_bytes=r.peak_mem_bytes,
        gpu_busy_frac=busy,
        mfu_vs_measured_peak=mfu[0],
        mfu_vs_datasheet_peak=mfu[1],
        hours_per_job=hours,
        hours_sweep=hours * config.num_arms * config.num_seeds,
        trustworthy=trustworthy,
        launch_bound=launch_bound,
        attention_backends=",".join(r.attention_backends or []) or None,
        compile_s=r.compile_s,
        status=_status(trustworthy, launch_bound),
    )


def _status(trustworthy: bool, launch_bound: bool | None) -> str:
    reasons = [why for why, bad in (("launch-bound", launch_bound), ("spread above 2%", not trustworthy)) if bad]
    return "ok" if not reasons else f"not trustworthy ({', '.join(reasons)}): mfu and hours are not trustworthy"


def _peaks(config: Config, device: torch.device) -> tuple[tuple[float | None, float | None], str]:
    """(measured or given peak, datasheet peak) in FLOP/s, and a note naming both."""
    if device.type != "cuda":
        given = None if config.peak_tflops is None else config.peak_tflops * 1e12
        return (given, None), (
            "none on CPU: mfu is None"
            if given is None
            else f"given: {config.peak_tflops:g} TFLOP/s (--peak-tflops); datasheet: none on CPU"
        )
    name = torch.cuda.get_device_name(device)
    sheet, sheet_note = flops.datasheet_peak_flops(name), peaks.describe(name)
    if config.peak_tflops is not None:
        given = f"given: {config.peak_tflops:g} TFLOP/s (--peak-tflops)"
        return (config.peak_tflops * 1e12, sheet), f"{given}; {sheet_note}"
    peak = flops.measure_peak_flops(device)
    models.release(device)
    return (peak, sheet), f"measured: bf16 8192^3 matmul on {name}: {peak / 1e12:.0f} TFLOP/s; {sheet_note}"


EVIDENCE = ("process_step_s", "attributed_s", "microbench", "kernel_table", "timings")
VARIANT_EVIDENCE = ("timings", "status", "kernel_table", "gpu_busy_frac")
HARNESS_INFO = ("harness_step", "harness_fallbacks", "harness_env")
"""What the measured baseline says of the harness (the contract with its variant's pieces, as it ran)."""


def _family(config: Config, peaks, evidence: dict, extra: dict) -> tuple[list, list, list, dict]:
    rows, whatifs, advice, harness_info = [], [], [], {}
    tokens = config.batch_size * config.seq_len
    for checkpoint in config.checkpoint:
        name = model_name(checkpoint)
        measured = stack_report.measure(config, checkpoint, name)
        baseline, others = measured.baseline, measured.others
        stack_report.collect(measured, extra)
        evidence[name] = {
            "baseline": {k: getattr(baseline, k) for k in EVIDENCE},
            # each stack's kernels by category too: where a stack's remaining time goes, not only the baseline's
            **{r.variant.name: {k: getattr(r, k) for k in VARIANT_EVIDENCE} for r in others},
        }
        rows += [_row(config, name, r, peaks) for r in (baseline, *others)]
        whatifs += whatif.table(name, baseline, others)
        numerics = {r.variant: r for r in measured.numerics_rows}
        advice += whatif.advice(name, baseline, others, baseline.spread_across_pct, tokens, numerics)
        harness_info = harness_info or {
            k: getattr(baseline, k) for k in HARNESS_INFO if getattr(baseline, k) is not None
        }
        harness_info.setdefault("lora_targets", {})[name] = baseline.lora_targets
    return rows, whatifs, advice, harness_info


def run(config: Config) -> ProbeResult:
    harness = reference.load_harness(config.harness)
    for checkpoint in config.checkpoint:  # every config.json readable before anything runs
        load_text_config(checkpoint)
    device = models.pick_device(config.device)
    result = ProbeResult(probe="carrier", config=config)
    pieces = contract.resolve(harness)
    info = {
        "harness_step": pieces.describe(),
        "harness_fallbacks": list(pieces.fallbacks),
        "harness_env": contract.fingerprint(harness),
    }
    if config.steps == 0:
        info["lora_targets"] = {}
        rows = [_counts_only(config, c, harness, info["lora_targets"]) for c in config.checkpoint]
        whatifs, advice = [], []
        peak_note = "not measured (--steps 0)"
    else:
        peaks, peak_note = _peaks(config, device)
        evidence, extra = {}, {}
        rows, whatifs, advice, measured_info = _family(config, peaks, evidence, extra)
        result.artifacts["evidence.json"] = json.dumps(evidence, indent=1)
        info.update(measured_info)
    result.tables[CARRIERS] = rows  # named by the contract other probes read it through
    if whatifs:
        result.tables["whatif"] = whatifs
    if config.steps:
        result.tables.update(extra.pop("tables"))
        info.update(extra)
    result.summary = {
        "device": _device_name(device) if config.steps else "meta",
        "peak": peak_note,
        "harness": config.harness,
        **info,
        "tokens_per_step": config.batch_size * config.seq_len,
        "hours_priced_for": hours_priced_for(config),
        "variants": [v.name for v in config.resolved_variants],
        "num_launch_bound": sum(bool(r.launch_bound) for r in rows),
        "num_untrustworthy": sum(r.trustworthy is False for r in rows),
    }
    if config.steps and device.type != "cuda":
        result.summary["note"] = "CPU: no device timeline, so gpu_busy_frac/launch_bound/mfu are None"
    result.summary["advice"] = advice
    result.checks += _checks(config, rows)
    return result


def hours_priced_for(config: Config) -> str:
    """What a row's hours price: this job's budget (its own token_budget, arms and seeds, which a sweep fills from
    cluster.yaml's budget), each row's variant as the stack, full steps of the measured shape (no batching
    strategy). `labprobe recommend` and `compare` price the lab's budget from the rows' step times instead."""
    return (
        f"{config.token_budget:,} tokens a job x {config.num_arms} arms x {config.num_seeds} seeds; stack: each "
        f"row's variant; batching: {config.batch_size} x {config.seq_len:,} tokens a step, {config.rows} rows"
    )


def _checks(config: Config, rows: list[CarrierRow]) -> list[Check]:
    failed = [
        f"{r.model}/{r.variant}: {r.status}"
        for r in rows
        if r.status not in ("ok", "counts only") and not r.status.startswith(("not trustworthy", "not applicable"))
    ]
    late = [f"{r.model}/{r.variant}'s {r.not_measured}" for r in rows if r.not_measured]
    detail = "; ".join(failed) if failed else f"{len(rows)} row(s) {'counted' if config.steps == 0 else 'measured'}"
    checks = [
        Check(
            name="all_measured",
            ok=not failed,
            detail=detail + (f" (after the timing, not measured: {'; '.join(late)})" if late else ""),
        )
    ]
    if config.steps:
        checks += [_trustworthy(rows), _fast_kernels(rows)]
    return checks


def _trustworthy(rows: list[CarrierRow]) -> Check:
    """Every measured row trustworthy; none measured is no evidence (not ok), and on a CPU, where nothing
    says whether a row was launch-bound, the detail does not claim GPU-bound."""
    measured = [r for r in rows if r.step_s is not None]
    bad = [f"{r.model}/{r.variant}" for r in rows if r.status.startswith("not trustworthy")]
    if not measured:
        return Check(name="rows_trustworthy", ok=False, detail="no row measured a step")
    if bad:
        detail = f"launch-bound or spread above 2% (in a process or across processes): {', '.join(bad)}"
    elif any(r.launch_bound is None for r in measured):
        detail = "every measured row within 2% spreads (launch-bound unknown: no device timeline)"
    else:
        detail = "every measured row GPU-bound with spreads <= 2%"
    return Check(name="rows_trustworthy", ok=not bad, detail=detail)


def _fast_kernels(rows: list[CarrierRow]) -> Check:
    """Fails when a timed process ran a reference fallback: its numbers time the slow path."""
    slow = {f"{r.model}/{r.variant}": r.kernel_fallbacks.split(", ") for r in rows if r.kernel_fallbacks}
    return kernel_watch.fast_kernels_check(slow, measured=any(r.step_s is not None for r in rows))


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
