"""`carrier`: what each model of a family really delivers for LoRA training, and how far to trust it.

For every `--checkpoint` (repeatable: a family), one row of table `carriers`, named by `model` (the
checkpoint directory's name; not `checkpoint`, which is the store's job key): `params_total` (the
base plus LoRA, a tied embedding once) and `params_trainable` (LoRA), `tokens_per_step`,
`warmup_steps` and `steps` (the timed window the statistics use), `step_s` (median), `tok_per_s`,
`spread_pct` ((max-min)/median over the window the statistics use), `spread_all_pct` (over every
timed step after warm-up: the window is chosen for being quiet, so spread_pct is biased low) and
`iqr_pct` (interquartile range / median), `peak_mem_bytes`,
`gpu_busy_frac` (kernel time from torch.profiler over step time), `mfu` (probes/flops.py states the
FLOP formula for a frozen base with LoRA; the peak is measured by a bf16 matmul or given with
--peak-tflops, and named in the summary), and projected hours for `--token-budget` tokens per job
(`hours_per_job`) and for `--num-arms` x `--num-seeds` jobs (`hours_sweep`).

A spread above 2% extends the timed steps up to --max-steps; still above, `trustworthy` is False
(True means exactly: the last `--steps` timed steps agreed within 2%; probes/timing.py).
A row whose GPU idles more than 10% of the step (`gpu_busy_frac` < 0.9) is `launch_bound`: its
number measures the host's CPU as much as its GPU. On the CPU (CI), gpu_busy_frac, launch_bound
and mfu are None: there is no device timeline to read. `--steps 0` reports parameter counts only,
built on the meta device: no weights, no GPU. A CUDA out-of-memory (while building the model or
adding LoRA, timing, or profiling) becomes a row with status "oom ...", never a crash of the family.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import torch

from probes import flops, kernels
from probes import harness as reference
from probes import models
from probes.mask import load_text_config
from probes.result import Check, ProbeResult, require
from probes.timing import time_steps



@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    checkpoint: tuple[Path, ...]
    """Checkpoint directories of the family (repeat --checkpoint), each with config.json."""
    weights: models.Weights = "checkpoint"
    """checkpoint: load the weights (local files only); random: build from config.json, random weights."""
    harness: str = reference.REFERENCE
    """Import path of the training harness providing discover_target_modules and compute_loss."""
    lora_rank: int = 32
    """LoRA rank on every target module the harness discovers."""
    lora_alpha: float = 64.0
    """LoRA alpha."""
    seq_len: int = 4096
    """Tokens per sequence."""
    batch_size: int = 1
    """Sequences per step (tokens per step = batch_size x seq_len)."""
    warmup_steps: int = 3
    """Untimed steps before timing."""
    steps: int = 10
    """Timed steps (the window the statistics use); 0: parameter counts only, on the meta device."""
    max_steps: int = 30
    """Cap on timed steps when the spread stays above 2 percent."""
    ce_chunk: int = reference.CHUNK_TOKENS
    """Cross-entropy chunk in tokens, passed to a harness whose compute_loss takes chunk_tokens."""
    token_budget: int = 1_000_000_000
    """Training tokens per job, for the projected hours."""
    num_arms: int = 1
    """Arms of the sweep to project (hours_sweep = hours_per_job x arms x seeds)."""
    num_seeds: int = 1
    """Seeds per arm of the sweep to project."""
    peak_tflops: float | None = None
    """The peak MFU divides by, TFLOP/s; unset: measured by a bf16 8192^3 matmul on the GPU."""
    device: str = "auto"
    """auto (the GPU if any, else CPU), cpu, or cuda[:N]."""

    def __post_init__(self) -> None:
        require(len(self.checkpoint) >= 1, "checkpoint", "needs at least one checkpoint")
        for name in ("lora_rank", "seq_len", "batch_size", "max_steps", "token_budget", "num_arms",
                     "num_seeds"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.steps >= 0 and self.warmup_steps >= 0, "steps", "`steps` and `warmup_steps` must be >= 0")
        require(self.max_steps >= self.steps, "max_steps", f"`max_steps` {self.max_steps} < `steps` {self.steps}")
        require(self.seq_len >= 2, "seq_len", f"must be >= 2, got {self.seq_len}")
        require(bool(self.harness.strip()), "harness", "is empty: give an import path (default probes.harness)")
        require(self.peak_tflops is None or self.peak_tflops > 0, "peak_tflops", "must be > 0")
        models.check_common(self)


@dataclasses.dataclass(frozen=True, kw_only=True)
class CarrierRow:
    model: str
    params_total: int | None
    params_trainable: int | None
    tokens_per_step: int
    warmup_steps: int | None = None
    steps: int | None = None
    step_s: float | None = None
    tok_per_s: float | None = None
    spread_pct: float | None = None
    spread_all_pct: float | None = None
    iqr_pct: float | None = None
    peak_mem_bytes: int | None = None
    gpu_busy_frac: float | None = None
    mfu: float | None = None
    hours_per_job: float | None = None
    hours_sweep: float | None = None
    trustworthy: bool | None = None
    launch_bound: bool | None = None
    status: str = "ok"


def _name(checkpoint: Path) -> str:
    return checkpoint.parent.name if checkpoint.name == "config.json" else checkpoint.name


def _counts_only(config: Config, checkpoint: Path, harness) -> CarrierRow:
    model = models.build_model(checkpoint, weights="random", device=torch.device("meta"))
    model = models.with_lora(model, harness, rank=config.lora_rank, alpha=config.lora_alpha)
    total, trainable = models.count_params(model)
    return CarrierRow(model=_name(checkpoint), params_total=total, params_trainable=trainable,
                      tokens_per_step=config.batch_size * config.seq_len, status="counts only")


def _load(config: Config, checkpoint: Path, harness, device: torch.device):
    """The model with LoRA; None after an out-of-memory (released), anything else propagates."""
    try:
        model = models.build_model(checkpoint, weights=config.weights, device=device)
        return models.with_lora(model, harness, rank=config.lora_rank, alpha=config.lora_alpha)
    except Exception as exc:
        if not models.is_oom(exc):
            raise
        models.release(device)
        return None


def _measure(config: Config, checkpoint: Path, harness, device: torch.device,
             peak_flops: float | None, raw: dict) -> CarrierRow:
    tokens = config.batch_size * config.seq_len
    model = _load(config, checkpoint, harness, device)
    if model is None:
        return CarrierRow(model=_name(checkpoint), params_total=None, params_trainable=None,
                          tokens_per_step=tokens, status="oom while loading")
    total, trainable = models.count_params(model)
    shape = flops.model_shape(model)
    base = dict(model=_name(checkpoint), params_total=total, params_trainable=trainable,
                tokens_per_step=tokens)
    try:
        step = _train_step(config, model, harness, device)
        models.release(device)
        t = time_steps(step, device=device, warmup=config.warmup_steps, steps=config.steps,
                       max_steps=config.max_steps)
        peak_mem = models.peak_mem_bytes(device)
    except Exception as exc:  # an OOM is a row; anything else is a bug and propagates
        if not models.is_oom(exc):
            raise
        return CarrierRow(**base, status=f"oom at {tokens} tokens/step")
    finally:
        del model
        models.release(device)
    raw[f"{len(raw)}:{base['model']}"] = t.to_dict()
    step_flops = flops.step_flops(shape, batch_size=config.batch_size, seq_len=config.seq_len)
    hours = config.token_budget * t.median_s / tokens / 3600.0
    return CarrierRow(
        **base, warmup_steps=t.num_warmup, steps=t.num_steps, step_s=t.median_s,
        tok_per_s=tokens / t.median_s, spread_pct=100 * t.spread, spread_all_pct=100 * t.spread_all,
        iqr_pct=100 * t.iqr, peak_mem_bytes=peak_mem,
        mfu=None if peak_flops is None else step_flops / t.median_s / peak_flops,
        hours_per_job=hours, hours_sweep=hours * config.num_arms * config.num_seeds,
        trustworthy=t.trustworthy)


def _train_step(config: Config, model, harness, device: torch.device) -> models.TrainStep:
    batch = models.make_batch(vocab_size=model.config.vocab_size, batch_size=config.batch_size,
                              seq_len=config.seq_len, device=device)
    return models.train_step(model, harness, batch, chunk_tokens=config.ce_chunk)


def _with_busy(config: Config, checkpoint: Path, harness, device: torch.device,
               row: CarrierRow) -> CarrierRow:
    """gpu_busy_frac from one profiled step, on a model built again: profiling runs only after
    every timing of the family, since CUPTI slows later launches once started (kernels.py)."""
    if row.status != "ok" or device.type != "cuda":
        return row
    model = _load(config, checkpoint, harness, device)
    if model is None:
        return dataclasses.replace(row, status="oom while loading (for profiling)")
    try:
        frac = kernels.busy_frac(_train_step(config, model, harness, device), device=device, step_s=row.step_s)
    except Exception as exc:
        if not models.is_oom(exc):
            raise
        return dataclasses.replace(row, status="oom while profiling")
    finally:
        del model
        models.release(device)
    return dataclasses.replace(row, gpu_busy_frac=frac, launch_bound=frac < kernels.LAUNCH_BOUND_BELOW)


def _peak(config: Config, device: torch.device) -> tuple[float | None, str]:
    if config.peak_tflops is not None:
        return config.peak_tflops * 1e12, f"given: {config.peak_tflops:g} TFLOP/s (--peak-tflops)"
    if device.type != "cuda":
        return None, "none on CPU: mfu is None"
    peak = flops.measure_peak_flops(device)
    return peak, f"measured: bf16 8192^3 matmul on {torch.cuda.get_device_name(device)}: {peak / 1e12:.0f} TFLOP/s"


def run(config: Config) -> ProbeResult:
    harness = reference.load_harness(config.harness)
    for checkpoint in config.checkpoint:  # every config.json readable before anything runs
        load_text_config(checkpoint)
    device = models.pick_device(config.device)
    result = ProbeResult(probe="carrier", config=config)
    raw: dict = {}
    if config.steps == 0:
        rows = [_counts_only(config, c, harness) for c in config.checkpoint]
        peak_note = "not measured (--steps 0)"
    else:
        peak_flops, peak_note = _peak(config, device)
        rows = [_measure(config, c, harness, device, peak_flops, raw) for c in config.checkpoint]
        rows = [_with_busy(config, c, harness, device, r) for c, r in zip(config.checkpoint, rows)]
    result.tables["carriers"] = rows
    result.summary = {"device": _device_name(device) if config.steps else "meta",
                      "peak": peak_note, "harness": config.harness,
                      "tokens_per_step": config.batch_size * config.seq_len,
                      "num_launch_bound": sum(bool(r.launch_bound) for r in rows),
                      "num_untrustworthy": sum(r.trustworthy is False for r in rows)}
    if config.steps and device.type != "cuda":
        result.summary["note"] = "CPU: no device timeline, so gpu_busy_frac/launch_bound/mfu are None"
    failed = [r.model for r in rows if "oom" in r.status]
    result.checks.append(Check(name="all_measured", ok=not failed,
                               detail=f"out of memory: {', '.join(failed)}" if failed else
                               f"{len(rows)} checkpoint(s) {'counted' if config.steps == 0 else 'measured'}"))
    result.artifacts["timings.json"] = json.dumps(raw, indent=1)
    return result


def _device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
