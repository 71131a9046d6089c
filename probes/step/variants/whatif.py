"""Predicted before measured: each variant's saving from the baseline's profile, then the advice.

A prediction takes the kernel time the baseline's profile attributes to the part of the step a
variant changes (probes.step.measure.attribution) and scales it by how much faster that part ran in
isolation under the variant's setting (probes.step.variants.microbench, same process, same shapes):

- `bf16-autocast`: `lora` kernels x (1 - adapter path under autocast / as in the baseline);
- `bf16-adapters`: the same for bf16 adapter weights, plus `optimizer` kernels x (1 - the
  optimizer over bf16 tensors / over the baseline's);
- `fused-adamw`: `optimizer` kernels x (1 - fused AdamW / the harness's optimizer);
- `ce-chunk=N`: `loss` kernels (lm_head and CE) x (1 - CE at chunk N / at the current chunk);
- `grad-ckpt`: minus the decoder's forward kernels (each layer's forward runs again);
- `compile` and `cuda-graphs`: not predicted (what the compiler fuses is its own choice, not in the profile);
- `liger`, `float8`, `micro-batch=N`: not predicted (their kernels and shapes are timed only in their own process).

A saving is kernel time removed over the step's time: on a launch-bound step (the GPU idles)
kernels removed may not shorten the step, and the row's basis says so. A saving the tool cannot
predict is None with the reason, never a guess. `advice` ranks the measured changes.
"""

from __future__ import annotations

import dataclasses

from probes.step.measure import attribution
from probes.step.variants import catalog
from probes.step.variants.measurement import Measurement

MIN_COVERAGE = 0.9
"""Below this share of kernel time attributed to a module, no prediction is made from it."""
MAX_ATTRIBUTION_GAP = 0.02
"""Attributed vs device kernel time per step, relative, above which nothing is predicted."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class WhatIfRow:
    model: str
    variant: str
    predicted_saving_pct: float | None
    """Of the baseline's step time; None: not predicted (basis says why)."""
    measured_saving_pct: float | None
    error_pp: float | None
    """predicted - measured, percentage points."""
    kernel_saving_pct: float | None
    """Kernel time the variant's own profile shows removed, in percent of the baseline's step: the
    quantity the prediction predicts, measured a second way. It exceeds the step's saving where the
    variant's step is launch-bound (its host, not its kernels, sets the pace); None on the CPU."""
    peak_mem_before_bytes: int | None
    peak_mem_after_bytes: int | None
    basis: str


def _ratio_saving(part_s: float, bench: dict, key: str) -> float:
    return part_s * (1.0 - bench[key] / bench["baseline"]) if bench.get("baseline") else 0.0


def _attribution_mismatch(att: dict[str, float], baseline: Measurement) -> str | None:
    """The attributed kernel time, checked against the device rows' sum (each kernel once): on a GPU
    they must agree within MAX_ATTRIBUTION_GAP, or a kernel was counted twice or lost."""
    kernel_s = baseline.kernel_s_per_step
    if baseline.gpu_busy_frac is None or not kernel_s:
        return None
    gap = sum(att.values()) / kernel_s - 1.0
    if abs(gap) <= MAX_ATTRIBUTION_GAP:
        return None
    return (
        f"not predicted: the attribution counts {1e3 * sum(att.values()):.1f} ms of kernel time a step, "
        f"the device {1e3 * kernel_s:.1f} ms ({100 * gap:+.1f}%)"
    )


def predict(variant: catalog.Variant, baseline: Measurement) -> tuple[float | None, str]:
    """(predicted saving in percent of the baseline step, how) or (None, why not)."""
    att, bench, step_s = baseline.attributed_s, baseline.microbench, baseline.step_s
    if baseline.status != "ok":
        return None, f"not predicted: the baseline was not measured ({baseline.status})"
    if (late := (baseline.not_measured or {}).get("micro-benchmarks")) is not None:
        return None, f"not predicted: the baseline's micro-benchmarks did not run ({late})"
    if not att or not bench or not step_s:
        return None, "not predicted: the baseline has no attributed profile or micro-benchmarks"
    covered = 1.0 - attribution.total(att, scope="unattributed") / (sum(att.values()) or 1.0)
    if covered < MIN_COVERAGE:
        return None, f"not predicted: only {100 * covered:.0f}% of the profile's kernel time is attributed to a module"
    if (mismatch := _attribution_mismatch(att, baseline)) is not None:
        return None, mismatch
    name = variant.name
    lora_s, opt_s = attribution.total(att, scope="lora"), attribution.total(att, scope="optimizer")
    if name == catalog.BASELINE:
        return 0.0, "the baseline itself"
    if "+" in name or ":" in name:  # probes.step.variants.search predicts a stack from its measured members
        return None, "not predicted here: a stack or a lab's own variant (--search predicts stacks from the singles)"
    if variant.liger:
        return None, "not predicted: Liger's kernels are timed only in its own process"
    if variant.compile:
        return None, "not predicted: what the compiler fuses is its own choice, not in the profile"
    if variant.float8 or variant.float8_frozen:
        return None, "not predicted: float8 GEMMs and their casts are timed only in its own process"
    if variant.micro_batch is not None:
        return None, "not predicted: smaller GEMMs and more launches, timed only in its own process"
    if variant.gradient_checkpointing:
        if (baseline.harness_step or {}).get("gradient_checkpointing"):
            return 0.0, "the baseline already checkpoints"
        fwd = sum(attribution.total(att, scope=s, phase="forward") for s in ("decoder", "lora", "base"))
        return -100 * fwd / step_s, f"recomputes the decoder's forward kernels, {1e3 * fwd:.1f} ms a step"
    if variant.ce_chunk is not None:
        loss_s, ce = attribution.total(att, scope="loss"), bench["ce"]
        now, new = ce.get(str(bench["ce_chunk"])), ce.get(str(variant.ce_chunk))
        if not now or new is None:
            return None, "not predicted: the CE at that chunk was not micro-benchmarked"
        saving = loss_s * (1 - new / now)
        return 100 * saving / step_s, f"loss kernels {1e3 * loss_s:.1f} ms x CE time ratio {new / now:.2f}"
    saving, how = 0.0, []
    if name in ("bf16-autocast", "bf16-adapters"):
        if not lora_s:
            return None, "not predicted: no kernel attributed to LoRA layers (not PEFT's?)"
        saving += _ratio_saving(lora_s, bench["lora"], name)
        how.append(f"LoRA kernels {1e3 * lora_s:.1f} ms x (1 - {bench['lora'][name] / bench['lora']['baseline']:.2f})")
    if name in ("bf16-adapters", "fused-adamw"):
        saving += _ratio_saving(opt_s, bench["optimizer"], name)
        how.append(
            f"optimizer kernels {1e3 * opt_s:.1f} ms x "
            f"(1 - {bench['optimizer'][name] / bench['optimizer']['baseline']:.2f})"
        )
    return 100 * saving / step_s, "; ".join(how)


def _saving_pct(before: Measurement, after: Measurement) -> float | None:
    if before.status != "ok" or after.status != "ok":
        return None
    return 100 * (before.step_s - after.step_s) / before.step_s


def _kernel_saving_pct(before: Measurement, after: Measurement) -> float | None:
    if before.gpu_busy_frac is None or after.status != "ok" or after.kernel_s_per_step is None:
        return None
    return 100 * (before.kernel_s_per_step - after.kernel_s_per_step) / before.step_s


def table(model: str, baseline: Measurement, results: list[Measurement]) -> list[WhatIfRow]:
    """One row per variant other than the baseline: predicted, measured, error, peak memory."""
    rows = []
    for r in results:
        predicted, basis = predict(r.variant, baseline)
        if predicted is not None and baseline.gpu_busy_frac is not None and baseline.gpu_busy_frac < 0.9:
            basis += "; the baseline is launch-bound: removed kernel time may not shorten the step"
        if predicted is not None and r.gpu_busy_frac is not None and r.gpu_busy_frac < 0.9:
            basis += (
                f"; the variant's step is launch-bound (GPU busy {r.gpu_busy_frac:.2f}): "
                "its host, not the kernels removed, sets its time"
            )
        measured = _saving_pct(baseline, r)
        rows.append(
            WhatIfRow(
                model=model,
                variant=r.variant.name,
                predicted_saving_pct=predicted,
                measured_saving_pct=measured,
                error_pp=None if predicted is None or measured is None else predicted - measured,
                kernel_saving_pct=_kernel_saving_pct(baseline, r),
                peak_mem_before_bytes=baseline.peak_mem_bytes,
                peak_mem_after_bytes=r.peak_mem_bytes,
                basis=basis if r.status == "ok" else f"{basis}; not measured: {r.status}",
            )
        )
    return rows


def _gib(value: int | None) -> str:
    return "n/a" if value is None else f"{value / 2**30:.1f} GiB"


def advice(
    model: str, baseline: Measurement, results: list[Measurement], noise_pct: float | None, tokens: int, numerics=None
) -> list[str]:
    """Measured changes ranked by speed-up: variant, tok/s before -> after (`tokens` a step), speed-up, peak,
    caveat; with `numerics` (variant name -> probes.step.variants.numerics.NumericsRow), whether its numerics are within
    tolerance: a change outside keeps its rank and says so."""
    ranked = sorted(
        (r for r in results if _saving_pct(baseline, r) is not None),
        key=lambda r: baseline.step_s / r.step_s,
        reverse=True,
    )
    lines = []
    for r in ranked:
        speedup = baseline.step_s / r.step_s
        noise = (
            f" (within the baseline's {noise_pct:.1f}% across-process spread)"
            if noise_pct is not None
            and abs(100 * (r.step_s / baseline.step_s - 1)) <= noise_pct  # step time, as the noise
            else ""
        )
        lines.append(
            f"{model} {r.variant.name}: {tokens / baseline.step_s:,.0f} -> {tokens / r.step_s:,.0f} "
            f"tok/s (x{speedup:.3f}){noise}{_trust_mark(baseline, r)}, peak {_gib(baseline.peak_mem_bytes)} -> "
            f"{_gib(r.peak_mem_bytes)}; {r.caveat}{_numerics_mark((numerics or {}).get(r.variant.name))}"
        )
    return lines


def _trust_mark(baseline: Measurement, row: Measurement) -> str:
    """A speed-up read from a row (or a baseline) whose own timings disagree by more than 2% says so."""
    doubtful = [m.variant.name for m in (baseline, row) if m.trustworthy is False]
    return f" (NOT TRUSTWORTHY: {' and '.join(doubtful)} spread above 2%)" if doubtful else ""


def _numerics_mark(row) -> str:
    if row is None:  # no numerics asked for
        return ""
    if row.within_tolerance is None:  # asked for, did not run (an OOM after the timing): no verdict to rank by
        return f"; numerics {row.basis}"
    return "; numerics within tolerance" if row.within_tolerance else f"; NUMERICS OUTSIDE TOLERANCE ({row.basis})"
