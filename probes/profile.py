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
  model's mask code then builds a block-diagonal mask and loses the fast path itself (NOTES.md).
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
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import torch

from probes import harness as reference
from probes import kernels, models
from probes.result import Check, ProbeResult, require
from probes.timing import Timings, time_steps

TERMS = ("quadratic", "linear", "fixed")


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
        require(len(set(self.seq_lens)) >= 3, f"--seq-lens needs >= 3 distinct lengths (quadratic, linear "
                f"and fixed terms), got {list(self.seq_lens)}")
        require(min(self.seq_lens) >= 2 and self.seq_len >= 2, "--seq-lens/--seq-len must be >= 2")
        for name in ("lora_rank", "batch_size", "steps", "profile_steps"):
            require(getattr(self, name) >= 1, f"--{name.replace('_', '-')} must be >= 1")
        require(self.warmup_steps >= 0, "--warmup-steps must be >= 0")
        require(bool(self.harness.strip()), "--harness is empty: give an import path (default probes.harness)")
        require(self.max_steps >= self.steps, f"--max-steps {self.max_steps} < --steps {self.steps}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingRow:
    seq_len: int
    batch_size: int
    tokens: int
    step_s: float | None = None
    spread_pct: float | None = None
    spread_all_pct: float | None = None
    """Over every timed step after warm-up (spread_pct is over the quiet window; probes/timing.py)."""
    iqr_pct: float | None = None
    steps: int | None = None
    peak_mem_bytes: int | None = None
    gpu_busy_frac: float | None = None
    launch_bound: bool | None = None
    in_fit: bool = False
    fit_s: float | None = None
    heldout_err_pct: float | None = None
    """|predicted from the other fitted points - measured| / measured; None with < 4 fitted points."""
    status: str = "ok"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitRow:
    term: str
    coef: float
    unit: str
    share_at_production_pct: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class PaddingRow:
    case: str
    shape: str
    """Batch shape(s) of the step: "2x4096", or "1x4096+1x2048" for two micro-batches."""
    real_tokens: int
    attention_mask: bool
    fast_path_all_layers: bool | None
    step_s: float | None
    spread_pct: float | None
    penalty_same_shape_s: float | None = None
    """half_padded only: its step_s minus unpadded_same_shape's (the mask's own cost)."""
    penalty_same_shape_pct: float | None = None
    penalty_same_tokens_s: float | None = None
    """half_padded only: its step_s minus unpadded_same_tokens's (what the padding costs)."""
    penalty_same_tokens_pct: float | None = None
    status: str = "ok"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CeRow:
    mode: str
    tokens: int
    chunk_tokens: int
    ce_s: float | None
    spread_pct: float | None
    peak_mem_bytes: int | None
    share_of_step_pct: float | None
    status: str = "ok"


def design(seq_lens, batch_size: int) -> np.ndarray:
    """Columns of the fit: batch*L^2 (attention), batch*L (per token), 1 (per batch)."""
    lengths = np.asarray(seq_lens, dtype=float)
    return np.stack([batch_size * lengths ** 2, batch_size * lengths, np.ones_like(lengths)], axis=1)


def predict(coef: np.ndarray, seq_len: int, batch_size: int) -> float:
    """The fitted step time at one length."""
    return float((design([seq_len], batch_size) @ coef)[0])


def fit_terms(seq_lens, step_s, batch_size: int) -> np.ndarray:
    """Least-squares (a, b, c); three points are interpolated exactly."""
    coef, *_ = np.linalg.lstsq(design(seq_lens, batch_size), np.asarray(step_s, float), rcond=None)
    return coef


def heldout_errors(seq_lens, step_s, batch_size: int) -> list[float | None]:
    """Per point: |prediction from a fit of the others - measured| / measured (None if < 3 left)."""
    if len(seq_lens) < 4:
        return [None] * len(seq_lens)
    out = []
    for i in range(len(seq_lens)):
        rest = [j for j in range(len(seq_lens)) if j != i]
        coef = fit_terms([seq_lens[j] for j in rest], [step_s[j] for j in rest], batch_size)
        predicted = predict(coef, seq_lens[i], batch_size)
        out.append(abs(predicted - step_s[i]) / step_s[i])
    return out


class _Session:
    """The model with LoRA, built once; every measurement of the probe runs through it."""

    def __init__(self, config: Config):
        self.config = config
        self.device = models.pick_device(config.device)
        self.harness = reference.load_harness(config.harness)
        models.load_text_config(config.checkpoint)  # a bad config.json is an InputError, before any build
        self.model = None
        self.raw: dict[str, dict] = {}

    def load(self) -> None:
        """Build the model and add LoRA (run under _oom_guard: an OOM here is a result, not a crash)."""
        c = self.config
        model = models.build_model(c.checkpoint, weights=c.weights, device=self.device)
        self.model = models.with_lora(model, self.harness, rank=c.lora_rank, alpha=c.lora_alpha)
        self.vocab_size = self.model.config.vocab_size

    def step(self, batch_size: int, seq_len: int, real_lengths=None) -> models.TrainStep:
        batch = models.make_batch(vocab_size=self.vocab_size, batch_size=batch_size, seq_len=seq_len,
                                  device=self.device, real_lengths=real_lengths)
        return models.train_step(self.model, self.harness, batch, chunk_tokens=self.config.ce_chunk)

    def micro_step(self, seq_lens: list[int]) -> models.TrainStep:
        """One step over several maskless batch-1 micro-batches (gradient accumulation)."""
        batches = [models.make_batch(vocab_size=self.vocab_size, batch_size=1, seq_len=n, device=self.device,
                                     seed=i) for i, n in enumerate(seq_lens)]
        return models.train_step(self.model, self.harness, batches, chunk_tokens=self.config.ce_chunk)

    def time(self, key: str, fn) -> tuple[Timings, int | None]:
        models.release(self.device)
        c = self.config
        t = time_steps(fn, device=self.device, warmup=c.warmup_steps, steps=c.steps, max_steps=c.max_steps)
        self.raw[key] = t.to_dict()
        return t, models.peak_mem_bytes(self.device)

    def busy_frac(self, fn, step_s: float) -> float:
        return kernels.busy_frac(fn, device=self.device, step_s=step_s)


def _oom_guard(session: _Session, what, on_oom):
    """Run what(); an out-of-memory returns on_oom(message) instead of ending the probe."""
    try:
        return what()
    except Exception as exc:
        if not models.is_oom(exc):
            raise
        if session.model is not None:
            session.model.zero_grad(set_to_none=True)
        models.release(session.device)
        return on_oom(f"oom: {str(exc).splitlines()[0][:120]}")


def _scaling_point(session: _Session, seq_len: int) -> ScalingRow:
    b = session.config.batch_size
    base = dict(seq_len=seq_len, batch_size=b, tokens=b * seq_len)

    def measure() -> ScalingRow:
        t, peak = session.time(f"scaling/{seq_len}", session.step(b, seq_len))
        return ScalingRow(**base, step_s=t.median_s, spread_pct=100 * t.spread,
                          spread_all_pct=100 * t.spread_all, iqr_pct=100 * t.iqr,
                          steps=t.num_steps, peak_mem_bytes=peak)

    return _oom_guard(session, measure, lambda msg: ScalingRow(**base, status=msg))


def _with_busy(session: _Session, row: ScalingRow) -> ScalingRow:
    """gpu_busy_frac of a timed point, profiled AFTER every timing (kernels.py: CUPTI lingers)."""
    if row.status != "ok" or session.device.type != "cuda":
        return row

    def measure() -> ScalingRow:
        busy = session.busy_frac(session.step(row.batch_size, row.seq_len), row.step_s)
        return dataclasses.replace(row, gpu_busy_frac=busy, launch_bound=busy < kernels.LAUNCH_BOUND_BELOW)

    return _oom_guard(session, measure, lambda msg: dataclasses.replace(row, status=f"profiler {msg}"))


def fit_scaling(session: _Session, rows: list[ScalingRow]) -> tuple[list[ScalingRow], list[FitRow], np.ndarray | None]:
    """Fit the GPU-bound points; every row gets its fitted value and held-out error."""
    fitted = [r for r in rows if r.status == "ok" and not r.launch_bound]
    if len(fitted) < 3:
        return rows, [], None
    b = session.config.batch_size
    lens, times = [r.seq_len for r in fitted], [r.step_s for r in fitted]
    coef = fit_terms(lens, times, b)
    errors = dict(zip(lens, heldout_errors(lens, times, b)))
    out = []
    for r in rows:
        fit_s = predict(coef, r.seq_len, b)
        err = errors.get(r.seq_len)
        if r.seq_len not in errors and r.step_s:  # left out of the fit: its error is held out already
            err = abs(fit_s - r.step_s) / r.step_s
        out.append(dataclasses.replace(r, in_fit=r.seq_len in errors, fit_s=fit_s,
                                       heldout_err_pct=None if err is None else 100 * err))
    parts = design([session.config.seq_len], b)[0] * coef
    total = parts.sum()
    units = ("s per batch*token^2", "s per token", "s per batch")
    fit = [FitRow(term=term, coef=float(c), unit=u, share_at_production_pct=float(100 * p / total))
           for term, c, u, p in zip(TERMS, coef, units, parts)]
    return out, fit, coef


def _fast_path(config: Config, padding: str) -> bool | None:
    """Whether every layer keeps SDPA's maskless path, read through the mask probe (config only).
    An architecture the mask probe cannot build gives None (unknown), not a failure here."""
    from probes import mask

    try:
        result = mask.run(mask.Config(checkpoint=config.checkpoint, seq_len=config.seq_len,
                                      batch_size=2, padding=padding))
    except Exception:
        return None
    return all(row.fast_path for row in result.tables["layers"])


def padding_penalty(session: _Session) -> list[PaddingRow]:
    """Half-padded 2 x n against the same shape unpadded and the same real tokens unpadded."""
    n = session.config.seq_len
    half = max(1, n // 2)
    cases = [("unpadded_same_shape", f"2x{n}", 2 * n, "none", lambda: session.step(2, n)),
             ("unpadded_same_tokens", f"1x{n}+1x{half}", n + half, "none", lambda: session.micro_step([n, half])),
             ("half_padded", f"2x{n}", n + half, "right", lambda: session.step(2, n, real_lengths=[n, half]))]
    # One mask probe per padding mode, not per case: the two unpadded cases ask the same question.
    fast = {padding: _fast_path(session.config, padding) for padding in {c[3] for c in cases}}
    rows = []
    for case, shape, real, padding, make in cases:
        base = dict(case=case, shape=shape, real_tokens=real, attention_mask=padding != "none",
                    fast_path_all_layers=fast[padding])

        def measure(case=case, base=base, make=make) -> PaddingRow:
            t, _ = session.time(f"padding/{case}", make())
            return PaddingRow(**base, step_s=t.median_s, spread_pct=100 * t.spread)

        rows.append(_oom_guard(session, measure, lambda msg, base=base: PaddingRow(
            **base, step_s=None, spread_pct=None, status=msg)))
    same_shape, same_tokens, padded = (r.step_s for r in rows)
    if padded is not None:
        extra = {}
        for name, ref in (("same_shape", same_shape), ("same_tokens", same_tokens)):
            if ref is not None:
                extra |= {f"penalty_{name}_s": padded - ref, f"penalty_{name}_pct": 100 * (padded - ref) / ref}
        rows[2] = dataclasses.replace(rows[2], **extra)
    return rows


def _production_step_s(config: Config, scaling: list[ScalingRow], coef) -> float | None:
    for r in scaling:
        if r.seq_len == config.seq_len and r.step_s is not None:
            return r.step_s
    return None if coef is None else predict(coef, config.seq_len, config.batch_size)


def cross_entropy_table(session: _Session) -> list[CeRow]:
    """CE alone; its share of the step is filled in by with_ce_share once the step time is known."""
    c, device = session.config, session.device
    tokens = c.batch_size * c.seq_len
    weight = session.model.get_base_model().get_output_embeddings().weight
    rows = []
    for mode, chunk in (("chunked", c.ce_chunk), ("unchunked", 0)):
        base = dict(mode=mode, tokens=tokens, chunk_tokens=min(chunk, tokens) if chunk else tokens)

        def measure(chunk=chunk, mode=mode, base=base) -> CeRow:
            generator = torch.Generator(device=device).manual_seed(0)
            hidden = torch.randn(tokens, weight.shape[1], device=device, dtype=weight.dtype,
                                 generator=generator, requires_grad=True)
            labels = torch.randint(0, weight.shape[0], (tokens,), device=device, generator=generator)

            def ce_step() -> None:
                reference.cross_entropy(hidden, weight, labels, chunk).backward()
                hidden.grad = None

            models.release(device)
            before = torch.cuda.memory_allocated(device) if device.type == "cuda" else None
            t, peak = session.time(f"ce/{mode}", ce_step)
            return CeRow(**base, ce_s=t.median_s, spread_pct=100 * t.spread,
                         peak_mem_bytes=None if peak is None else peak - before,
                         share_of_step_pct=None)

        rows.append(_oom_guard(session, measure, lambda msg, base=base: CeRow(
            **base, ce_s=None, spread_pct=None, peak_mem_bytes=None, share_of_step_pct=None, status=msg)))
    return rows


def with_ce_share(rows: list[CeRow], step_s: float | None) -> list[CeRow]:
    return [dataclasses.replace(r, share_of_step_pct=100 * r.ce_s / step_s) if r.ce_s and step_s else r
            for r in rows]


def kernel_profile(session: _Session) -> kernels.Profile | None:
    c = session.config
    step = session.step(c.batch_size, c.seq_len)

    def measure() -> kernels.Profile:
        step()  # a warm step outside the profile: no allocator or autotuner start-up inside it
        return kernels.profile_steps(step, device=session.device, num_steps=c.profile_steps)

    return _oom_guard(session, measure, lambda msg: None)


def run(config: Config) -> ProbeResult:
    session = _Session(config)
    result = ProbeResult(probe="profile", config=config)
    failed = _oom_guard(session, session.load, lambda msg: msg.replace("oom:", "oom while loading:", 1))
    if failed:
        return _not_loaded(result, session, failed)
    # Every timing first, every profiler run after: CUPTI stays attached once started (kernels.py).
    timed = [_scaling_point(session, n) for n in sorted(set(config.seq_lens))]
    padding = padding_penalty(session)
    ce = cross_entropy_table(session)
    scaling, fit, coef = fit_scaling(session, [_with_busy(session, r) for r in timed])
    step_s = _production_step_s(config, scaling, coef)
    result.tables.update(scaling=scaling, fit=fit, padding_penalty=padding, ce=with_ce_share(ce, step_s))
    prof = kernel_profile(session)
    result.tables["kernels"] = [] if prof is None else kernels.kernel_table(prof)
    _summarise(result, session, scaling, step_s, prof)
    result.artifacts["timings.json"] = json.dumps(session.raw, indent=1)
    if prof is not None:
        result.artifacts["kernels_key_averages.txt"] = prof.table
    return result


def _not_loaded(result: ProbeResult, session: _Session, message: str) -> ProbeResult:
    """The model (or its LoRA) did not fit: one row per length saying so, and a failed check."""
    b = session.config.batch_size
    result.tables["scaling"] = [ScalingRow(seq_len=n, batch_size=b, tokens=b * n, status=message)
                                for n in sorted(set(session.config.seq_lens))]
    result.summary = {"device": str(session.device), "harness": session.config.harness, "status": message}
    result.checks.append(Check(name="model_loaded", ok=False, detail=message))
    return result


def _summarise(result: ProbeResult, session: _Session, scaling: list[ScalingRow],
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
