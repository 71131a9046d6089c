"""`profile`: where a LoRA training step's time goes, measured through the lab's own harness.

Tables (times in seconds, medians of timed steps after warm-up; probes/timing.py):
- `scaling`: step time at each `--seq-lens` length at a fixed batch, with spread, IQR, peak memory
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
  fast path on every layer (read by the `mask` probe through the model's own mask code).
- `ce`: lm_head + cross-entropy alone, forward and backward, at the production shape, chunked and
  unchunked (full fp32 logits), with peak memory over the inputs and its share of the step (the
  measured step at seq_len when it is one of --seq-lens, else the fitted one: summary
  `step_s_source`). Measured with the reference implementation (probes/harness.py); a lab harness's
  own CE is in its step times. An out-of-memory while building the model or adding LoRA is a result
  whose rows say "oom while loading", never a crash.
- `kernels`: torch.profiler over `--profile-steps` steps at the production shape, device kernel rows
  only (probes/kernels.py), by category. Artifacts: the unedited key_averages() table and every raw
  timing. On the CPU (CI) the rows are CPU ops by self time and gpu_busy_frac is None.

This module holds the Config, the order of the measurements and the summary; the measurements are in
probes/profile_measure.py, the fit in probes/profile_fit.py.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from probes import harness as reference
from probes import kernels, models
from probes import profile_measure as measure
from probes.profile_fit import ScalingRow, fit_scaling, predict
from probes.result import Check, ProbeResult, require


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    checkpoint: Path
    """Checkpoint directory with config.json (and weights unless --weights random)."""
    weights: models.Weights = "checkpoint"
    """checkpoint: load the weights (local files only); random: build from config.json, random weights."""
    harness: str = reference.REFERENCE
    """Import path of the training harness providing discover_target_modules and compute_loss."""
    lora_rank: int = 32
    """LoRA rank on every target module the harness discovers."""
    lora_alpha: float = 64.0
    """LoRA alpha."""
    seq_lens: tuple[int, ...] = (2048, 4096, 6144, 8192, 12288)
    """Sequence lengths of the scaling table (at least three; four GPU-bound ones for a held-out error)."""
    batch_size: int = 1
    """Sequences per step in the scaling table."""
    seq_len: int = 4096
    """The training run's sequence length: term shares, padding penalty, CE and kernels use it."""
    warmup_steps: int = 2
    """Untimed steps before each timing."""
    steps: int = 5
    """Timed steps per measurement (the window the statistics use)."""
    max_steps: int = 15
    """Cap on timed steps when the spread stays above 2 percent."""
    ce_chunk: int = reference.CHUNK_TOKENS
    """Cross-entropy chunk in tokens (passed to a harness whose compute_loss takes chunk_tokens)."""
    profile_steps: int = 3
    """Steps under torch.profiler for the kernel table (each scaling point gets one for gpu_busy_frac)."""
    device: str = "auto"
    """auto (the GPU if any, else CPU), cpu, or cuda[:N]."""

    def __post_init__(self) -> None:
        require(len(set(self.seq_lens)) >= 3, "seq_lens", f"needs >= 3 distinct lengths (quadratic, linear "
                f"and fixed terms), got {list(self.seq_lens)}")
        require(min(self.seq_lens) >= 2 and self.seq_len >= 2, "seq_lens", "`seq_lens`/`seq_len` must be >= 2")
        for name in ("lora_rank", "batch_size", "steps", "profile_steps"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        models.check_common(self)
        require(bool(self.harness.strip()), "harness", "is empty: give an import path (default probes.harness)")
        require(self.max_steps >= self.steps, "max_steps", f"`max_steps` {self.max_steps} < `steps` {self.steps}")


def run(config: Config) -> ProbeResult:
    session = measure.Session(config)
    result = ProbeResult(probe="profile", config=config)
    failed = measure.oom_guard(session, session.load, lambda msg: msg.replace("oom:", "oom while loading:", 1))
    if failed:
        return _not_loaded(result, session, failed)
    # Every timing first, every profiler run after: CUPTI stays attached once started (kernels.py).
    timed = [measure.scaling_point(session, n) for n in sorted(set(config.seq_lens))]
    padding = measure.padding_penalty(session)
    ce = measure.cross_entropy_table(session)
    scaling, fit, coef = fit_scaling([measure.with_busy(session, r) for r in timed],
                                     batch_size=config.batch_size, seq_len=config.seq_len)
    step_s = _production_step_s(config, scaling, coef)
    result.tables.update(scaling=scaling, fit=fit, padding_penalty=padding, ce=measure.with_ce_share(ce, step_s))
    prof = measure.kernel_profile(session)
    result.tables["kernels"] = [] if prof is None else kernels.kernel_table(prof)
    _summarise(result, session, scaling, step_s, prof)
    result.artifacts["timings.json"] = json.dumps(session.raw, indent=1)
    if prof is not None:
        result.artifacts["kernels_key_averages.txt"] = prof.table
    return result


def _production_step_s(config: Config, scaling: list[ScalingRow], coef) -> float | None:
    for r in scaling:
        if r.seq_len == config.seq_len and r.step_s is not None:
            return r.step_s
    return None if coef is None else predict(coef, config.seq_len, config.batch_size)


def _not_loaded(result: ProbeResult, session: measure.Session, message: str) -> ProbeResult:
    """The model (or its LoRA) did not fit: one row per length saying so, and a failed check."""
    b = session.config.batch_size
    result.tables["scaling"] = [ScalingRow(seq_len=n, batch_size=b, tokens=b * n, status=message)
                                for n in sorted(set(session.config.seq_lens))]
    result.summary = {"device": str(session.device), "harness": session.config.harness, "status": message}
    result.checks.append(Check(name="model_loaded", ok=False, detail=message))
    return result


def _summarise(result: ProbeResult, session: measure.Session, scaling: list[ScalingRow],
               step_s: float | None, prof: kernels.Profile | None) -> None:
    c, cuda = session.config, session.device.type == "cuda"
    fitted = [r.seq_len for r in scaling if r.in_fit]
    launch = [r.seq_len for r in scaling if r.launch_bound]
    errors = [r.heldout_err_pct for r in scaling if r.in_fit and r.heldout_err_pct is not None]
    noisy = [r.seq_len for r in scaling if r.status == "ok" and not r.launch_bound and r.spread_pct > 2]
    padding = {r.case: r for r in result.tables["padding_penalty"]}
    measured = any(r.seq_len == c.seq_len and r.step_s is not None for r in scaling)
    summary = {"device": torch.cuda.get_device_name(session.device) if cuda else "cpu",
               "harness": c.harness, "seq_len": c.seq_len, "step_s": step_s,
               "step_s_source": "measured" if measured else "fitted" if step_s is not None else None,
               "fitted_lens": fitted, "launch_bound_lens": launch,
               "max_heldout_err_pct": max(errors) if errors else None}
    summary.update({f"{f.term}_share_pct": f.share_at_production_pct for f in result.tables["fit"]})
    if "half_padded" in padding:
        summary["padding_penalty_same_shape_pct"] = padding["half_padded"].penalty_same_shape_pct
        summary["padding_penalty_same_tokens_pct"] = padding["half_padded"].penalty_same_tokens_pct
    if prof is not None:
        wall = step_s if cuda and step_s else prof.wall_s / prof.num_steps
        summary.update(kernel_s_per_step=prof.kernel_s_per_step, step_wall_s=wall,
                       gpu_busy_frac=kernels.busy_per_step_s(prof) / wall if cuda else None)
    if not cuda:
        summary["note"] = ("CPU: kernel rows are CPU ops by self time; gpu_busy_frac and launch_bound "
                           "are None, so every point is fitted")
    result.summary = summary
    result.checks += [
        Check(name="fit_has_3_points", ok=len(fitted) >= 3,
              detail=f"fitted {fitted}; left out as launch-bound {launch}; "
                     f"oom/failed {[r.seq_len for r in scaling if r.status != 'ok']}"),
        # three points are fitted exactly: with fewer than 4 nothing was held out, so not measured
        Check(name="heldout_err_le_5pct", ok=len(fitted) >= 4 and bool(errors) and max(errors) <= 5.0,
              detail=f"not measured: needs >= 4 GPU-bound fitted points, got {len(fitted)}"
              if len(fitted) < 4 or not errors else f"max {max(errors):.2f}% over {len(fitted)} fitted points"),
        Check(name="spread_le_2pct", ok=not noisy, detail=f"GPU-bound lengths above 2%: {noisy}"),
    ]
    if prof is not None:
        result.checks.append(Check(
            name="kernel_time_le_step", ok=prof.kernel_s_per_step <= summary["step_wall_s"],
            detail=f"{prof.kernel_s_per_step:.4f} s of kernels per {summary['step_wall_s']:.4f} s step"))
