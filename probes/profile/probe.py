"""`profile`: where a LoRA training step's time goes, measured through the lab's own harness.

Tables (times in seconds, medians of timed steps after warm-up; probes.step.measure.timing):
- `scaling`: step time at each `--fit-lens` length at a fixed batch, with spread, IQR, peak memory
  and `gpu_busy_frac` (kernel time over step time). A point whose GPU idles more than 10% of the step
  is `launch_bound` (the host sets its time) and is left out of the fit; the row says so, with the
  fitted value and the error of predicting it from a fit of the other points (`heldout_err_pct`).
  A CUDA out-of-memory at some length is a row with status "oom".
- `fit`: least squares of step_s = a*batch*L^2 + b*batch*L + c over the GPU-bound points (>= 3),
  one row per term with its share at `--seq-len` (the production length). Three points are
  interpolated exactly, so the held-out check needs >= 4 fitted points: with fewer it fails as
  "not measured". The default lengths leave >= 4 GPU-bound points for a 4B on an H200 (2,048 tokens
  is at the launch-bound edge there).
- `padding_penalty`: a batch of 2 x seq_len whose second row is half padding (explicit attention
  mask) against two references: `unpadded_same_shape` (2 x seq_len fully real, no mask) and
  `unpadded_same_tokens` (the same 1.5 x seq_len real tokens with no padding: the full row and the
  half row as two micro-batches of one step, each maskless, gradients accumulated, one optimizer
  step). The second is what padding costs; a packed row of 1.5 x seq_len would not do, since the
  model's mask code then builds a block-diagonal mask and loses the fast path itself (docs/measurement.md).
  In seconds and percent against both, and whether each case keeps SDPA's maskless `is_causal`
  fast path on every layer (read as the `mask` probe reads it, through the model's own mask code:
  probes.step.masking.fast_path).
- `ce`: lm_head + cross-entropy alone, forward and backward, at the production shape, chunked and
  unchunked (full fp32 logits), with peak memory over the inputs and its share of the step (the
  measured step at seq_len when it is one of --fit-lens, else the fitted one: summary
  `step_s_source`). Measured with the reference implementation (probes.step.harness); a lab harness's
  own CE is in its step times. An out-of-memory while building the model or adding LoRA is a result
  whose rows say "oom while loading", never a crash.
- `kernels`: torch.profiler over `--profile-steps` steps at the production shape, device kernel rows
  only (probes.step.measure.kernels), by category. Artifacts: the unedited key_averages() table and every raw
  timing. On the CPU (CI) the rows are CPU ops by self time and gpu_busy_frac is None.
- `syncs`: where one production step waits for the device (`.item()`, nonzero, indexing by a boolean
  mask), by the line outside torch that made it wait, with summary `host_waits_per_step`. After each
  wait the GPU idles until the host launches again (probes.step.measure.syncs). On the CPU the ops that would
  wait on CUDA. Waits of ops a compiled graph calls directly are not seen (a lab harness that compiles its
  loss); summary `syncs_census` says why when the census could not run.

- `variants` and `whatif` (with `--variant`): the step at `--batch-size` x `--seq-len` under each
  variant in its own fresh process (the baseline in `--processes`), and each variant's saving
  predicted from the baseline's attributed profile before it is measured (probes.step.variants.whatif); the
  summary ends with `advice`, the measured changes ranked by speed-up.

This module holds the order of the measurements and the summary; the Config is in
probes.profile.config, the measurements in probes.profile.measure and
probes.profile.variants, the fit in probes.step.steptime.fit.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from probes.profile import measure
from probes.profile import variants as profile_variants
from probes.profile.config import Config
from probes.profile.contract import FIT, PADDING_PENALTY, SCALING, VARIANTS
from probes.result import Check, ProbeResult
from probes.step.measure import kernel_watch, kernels
from probes.step.session import Session, oom_guard, with_busy
from probes.step.steptime.fit import ScalingRow, fit_scaling, predict
from probes.step.train import models


def run(config: Config) -> ProbeResult:
    session = Session(config, warmup_steps=config.warmup_steps, steps=config.steps, max_steps=config.max_steps)
    result = ProbeResult(probe="profile", config=config)
    logged: list[str] = []
    with kernel_watch.watch(logged):  # a hybrid without its kernels logs a reference fallback (fast_kernels)
        failed = oom_guard(session, session.load, lambda msg: msg.replace("oom:", "oom while loading:", 1))
        if failed:
            return _not_loaded(result, session, failed)
        # Every timing first, every profiler run after: CUPTI stays attached once started (kernels.py).
        timed = [measure.scaling_point(session, n) for n in sorted(set(config.seq_lens))]
        padding = measure.padding_penalty(session)
        ce = measure.cross_entropy_table(session)
    slow = kernel_watch.fallbacks(logged)
    scaling, fit, coef = fit_scaling(
        [with_busy(session, r) for r in timed], batch_size=config.batch_size, seq_len=config.seq_len
    )
    step_s = _production_step_s(config, scaling, coef)
    # the tables another probe reads are named by the contract it reads them through
    result.tables |= {SCALING: scaling, FIT: fit, PADDING_PENALTY: padding}
    result.tables["ce"] = measure.with_ce_share(ce, step_s)
    prof = measure.kernel_profile(session)
    result.tables["kernels"] = [] if prof is None else kernels.kernel_table(prof)
    _summarise(result, session, scaling, step_s, prof)
    result.summary["kernel_fallbacks"] = ", ".join(slow) or None
    measured = any(r.status == "ok" for r in scaling)
    result.checks.append(kernel_watch.fast_kernels_check({Path(config.checkpoint).name: slow}, measured=measured))
    waits, why_not = measure.sync_census(session)  # after the timings and the profile: it slows its step
    result.tables["syncs"] = waits or []
    result.summary["host_waits_per_step"] = None if waits is None else sum(w.count_per_step for w in waits)
    if why_not:
        result.summary["syncs_census"] = why_not
    result.artifacts["timings.json"] = json.dumps(session.raw, indent=1)
    if prof is not None:
        result.artifacts["kernels_key_averages.txt"] = prof.table
    if config.variant:
        session.model = None  # the variants run in their own processes: give this one's memory back
        models.release(session.device)
        _with_variants(result, config)
    return result


def _with_variants(result: ProbeResult, config: Config) -> None:
    rows, whatifs, advice, evidence = profile_variants.measure(config)
    result.tables |= {VARIANTS: rows, "whatif": whatifs}
    result.artifacts["variants_evidence.json"] = evidence
    failed = [f"{r.variant}: {r.status}" for r in rows if r.status != "ok"]
    result.checks.append(
        Check(
            name="variants_measured",
            ok=not failed,
            detail="; ".join(failed) if failed else f"{len(rows)} variant(s) measured",
        )
    )
    result.summary["advice"] = advice


def _production_step_s(config: Config, scaling: list[ScalingRow], coef) -> float | None:
    for r in scaling:
        if r.seq_len == config.seq_len and r.step_s is not None:
            return r.step_s
    return None if coef is None else predict(coef, config.seq_len, config.batch_size)


def _not_loaded(result: ProbeResult, session: Session, message: str) -> ProbeResult:
    """The model (or its LoRA) did not fit: one row per length saying so, and a failed check."""
    b = session.config.batch_size
    result.tables[SCALING] = [
        ScalingRow(seq_len=n, batch_size=b, tokens=b * n, status=message) for n in sorted(set(session.config.seq_lens))
    ]
    result.summary = {"device": str(session.device), "harness": session.config.harness, "status": message}
    result.checks.append(Check(name="model_loaded", ok=False, detail=message))
    return result


def _summarise(
    result: ProbeResult,
    session: Session,
    scaling: list[ScalingRow],
    step_s: float | None,
    prof: kernels.Profile | None,
) -> None:
    c, cuda = session.config, session.device.type == "cuda"
    fitted = [r.seq_len for r in scaling if r.in_fit]
    errors = [r.heldout_err_pct for r in scaling if r.in_fit and r.heldout_err_pct is not None]
    padding = {r.case: r for r in result.tables[PADDING_PENALTY]}
    measured = any(r.seq_len == c.seq_len and r.step_s is not None for r in scaling)
    summary = {
        "device": torch.cuda.get_device_name(session.device) if cuda else "cpu",
        "harness": c.harness,
        "seq_len": c.seq_len,
        "step_s": step_s,
        "step_s_source": _source(c.seq_len, measured, step_s, fitted),
        "fitted_lens": fitted,
        "launch_bound_lens": [r.seq_len for r in scaling if r.launch_bound],
        "max_heldout_err_pct": max(errors) if errors else None,
        "params_total": session.counts.params_total,
        "params_active": round(session.counts.params_active),
    }
    summary.update({f"{f.term}_share_pct": f.share_at_production_pct for f in result.tables[FIT]})
    if "half_padded" in padding:
        summary["padding_penalty_same_shape_pct"] = padding["half_padded"].penalty_same_shape_pct
        summary["padding_penalty_same_tokens_pct"] = padding["half_padded"].penalty_same_tokens_pct
    if prof is not None:
        wall = step_s if cuda and step_s else prof.wall_s / prof.num_steps
        summary.update(
            kernel_s_per_step=prof.kernel_s_per_step,
            step_wall_s=wall,
            gpu_busy_frac=kernels.busy_per_step_s(prof) / wall if cuda else None,
        )
    if not cuda:
        summary["note"] = (
            "CPU: kernel rows are CPU ops by self time; gpu_busy_frac and launch_bound "
            "are None, so every point is fitted"
        )
    result.summary = summary
    result.checks += [*_checks(scaling, prof, summary.get("step_wall_s")), _production_check(c.seq_len, summary)]
    if "half_padded" in padding and "unpadded_same_shape" in padding:
        result.checks.append(_penalty_check(padding["half_padded"], padding["unpadded_same_shape"]))


def _penalty_check(padded, unpadded) -> Check:
    """The padding penalty is a difference of two medians: a number when the two cases are quiet (spreads
    <= 2%) or it stands above their spreads; not when noisy cases hide it (goodput charges it to every
    masked batch, a negative one as 0)."""
    penalty, spreads = padded.penalty_same_shape_pct, (padded.spread_pct, unpadded.spread_pct)
    if penalty is None or None in spreads:
        return Check(name="padding_penalty_above_noise", ok=False, detail="not measured")
    noise, quiet = sum(spreads), max(spreads) <= 2.0  # quiet cases: a small penalty is a small penalty
    ok = abs(penalty) > noise or quiet
    return Check(
        name="padding_penalty_above_noise",
        ok=ok,
        detail=f"penalty {penalty:+.2f}% against the cases' spreads {spreads[0]:.2f}% + {spreads[1]:.2f}%"
        + ("" if ok else ": within the noise of cases spread above 2%, not a measured penalty"),
    )


def _source(seq_len: int, measured: bool, step_s: float | None, fitted: list[int]) -> str | None:
    """Where the production length's step time comes from: measured there, the fit within its lengths, or
    the fit stretched beyond them (a quadratic fit's error grows fast outside its points)."""
    if measured or step_s is None:
        return "measured" if measured else None
    if fitted and min(fitted) <= seq_len <= max(fitted):
        return "fitted"
    return f"extrapolated beyond the fitted lengths {min(fitted)}-{max(fitted)}" if fitted else "extrapolated"


def _production_check(seq_len: int, summary: dict) -> Check:
    """The step time every share and the CE fraction are taken at: measured, or fitted within its lengths."""
    step_s, source = summary["step_s"], summary["step_s_source"]
    if step_s is not None and step_s <= 0:
        return Check(
            name="production_step_in_fit", ok=False, detail=f"the fit gives {step_s:.4g} s at {seq_len}: no step time"
        )
    ok = source in ("measured", "fitted")
    return Check(
        name="production_step_in_fit",
        ok=ok,
        detail=f"--seq-len {seq_len}: step_s {source or 'not known'}"
        + ("" if ok else "; measure it (add it to --fit-lens) before trusting the shares at it"),
    )


def _checks(scaling: list[ScalingRow], prof: kernels.Profile | None, step_wall_s: float | None) -> list[Check]:
    """The fit's points, its held-out error, the points' spread and, profiled, kernel time within the step."""
    fitted = [r.seq_len for r in scaling if r.in_fit]
    launch = [r.seq_len for r in scaling if r.launch_bound]
    errors = [r.heldout_err_pct for r in scaling if r.in_fit and r.heldout_err_pct is not None]
    noisy = [r.seq_len for r in scaling if r.status == "ok" and not r.launch_bound and r.spread_pct > 2]
    measured = any(r.status == "ok" for r in scaling)
    checks = [
        Check(
            name="fit_has_3_points",
            ok=len(fitted) >= 3,
            detail=f"fitted {fitted}; left out as launch-bound {launch}; "
            f"oom/failed {[r.seq_len for r in scaling if r.status != 'ok']}",
        ),
        # three points are fitted exactly: with fewer than 4 nothing was held out, so not measured
        Check(
            name="heldout_err_le_5pct",
            ok=len(fitted) >= 4 and bool(errors) and max(errors) <= 5.0,
            detail=f"not measured: needs >= 4 GPU-bound fitted points, got {len(fitted)}"
            if len(fitted) < 4 or not errors
            else f"max {max(errors):.2f}% over {len(fitted)} fitted points",
        ),
        Check(
            name="spread_le_2pct",
            ok=measured and not noisy,
            detail=f"GPU-bound lengths above 2%: {noisy}" if measured else "no length measured",
        ),
    ]
    if prof is not None:
        checks.append(
            Check(
                name="kernel_time_le_step",
                ok=prof.kernel_s_per_step <= step_wall_s,
                detail=f"{prof.kernel_s_per_step:.4f} s of kernels per {step_wall_s:.4f} s step",
            )
        )
    return checks
