"""A model session: the model with LoRA built once through the harness, every timing and profile of a
probe run through it (`profile` measures its scaling, padding and CE tables through one; `replay` its
fit points and replayed steps). With a variant (a stack), the model and every step carry its changes
as the worker applies them (probes.step.variants.worker), so a step here is the one carrier measures.
`oom_guard` turns an out-of-memory into a row (or a result) rather than a crash."""

from __future__ import annotations

import dataclasses
import logging

from probes.step import harness as reference
from probes.step.config import StepConfig
from probes.step.measure import kernels
from probes.step.measure.timing import Timings, time_steps
from probes.step.train import contract, models, params
from probes.step.variants import catalog, libvariants

# The worker's own changes to a built model, so a stack here is the one carrier and profile measure.
from probes.step.variants.worker import prepare as prepare_variant

LOG = logging.getLogger(__name__)


class Session:
    """The model with LoRA, built once; every measurement of a probe runs through it. `config` is the
    probe's own (a StepConfig; the probe's measurements read its other fields); each timing runs
    warmup_steps untimed steps, then steps timed ones, extended up to max_steps while the spread is high."""

    def __init__(
        self,
        config: StepConfig,
        *,
        warmup_steps: int,
        steps: int,
        max_steps: int,
        variant: catalog.Variant | None = None,
    ):
        self.config = config
        self.warmup_steps, self.steps, self.max_steps = warmup_steps, steps, max_steps
        self.device = models.pick_device(config.device)
        self.harness = reference.load_harness(config.harness)
        self.variant = variant
        self.pieces = contract.resolve(self.harness)
        self.chunk = config.ce_chunk
        if variant is not None:
            self.pieces = variant.contract(self.pieces)
            self.chunk = config.ce_chunk if variant.ce_chunk is None else variant.ce_chunk
        models.load_text_config(config.checkpoint)  # a bad config.json is an InputError, before any build
        self.model = None
        self.raw: dict[str, dict] = {}

    def load(self) -> None:
        """Build the model and add LoRA (run under oom_guard: an OOM here is a result, not a crash)."""
        c = self.config
        LOG.info("building %s (%s weights) on %s", c.checkpoint.name, c.weights, self.device)
        model = models.build_model(c.checkpoint, weights=c.weights, device=self.device)
        if self.variant is not None:
            libvariants.prepare_base(model, self.variant)
        self.model = models.with_lora(model, self.harness, rank=c.lora_rank, alpha=c.lora_alpha)
        if self.variant is not None:
            prepare_variant(self.model, self.variant, self.pieces)
        self.vocab_size = self.model.config.vocab_size
        self.counts = params.count(self.model)

    def step(self, batch_size: int, seq_len: int, real_lengths=None) -> models.TrainStep:
        batch = models.make_batch(
            vocab_size=self.vocab_size,
            batch_size=batch_size,
            seq_len=seq_len,
            device=self.device,
            real_lengths=real_lengths,
        )
        return models.train_step(self.model, self.harness, batch, chunk_tokens=self.chunk, contract=self.pieces)

    def micro_step(self, seq_lens: list[int]) -> models.TrainStep:
        """One step over several maskless batch-1 micro-batches (gradient accumulation)."""
        batches = [
            models.make_batch(vocab_size=self.vocab_size, batch_size=1, seq_len=n, device=self.device, seed=i)
            for i, n in enumerate(seq_lens)
        ]
        return models.train_step(self.model, self.harness, batches, chunk_tokens=self.chunk, contract=self.pieces)

    def time(self, key: str, fn) -> tuple[Timings, int | None]:
        models.release(self.device)
        LOG.info("%s: timing %d warm-up and %d+ steps", key, self.warmup_steps, self.steps)
        t = time_steps(fn, device=self.device, warmup=self.warmup_steps, steps=self.steps, max_steps=self.max_steps)
        self.raw[key] = t.to_dict()
        LOG.info("%s: median %.3f s a step over %d steps", key, t.median_s, t.num_steps)
        return t, models.peak_mem_bytes(self.device)

    def busy_frac(self, fn, step_s: float) -> float:
        return kernels.busy_frac(fn, device=self.device, step_s=step_s)


def oom_guard(session: Session, what, on_oom):
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


def with_busy(session: Session, row, real_lengths: list[int] | None = None):
    """A timed fit point's row (probes.step.steptime.fit.ScalingRow) with its gpu_busy_frac and launch_bound, profiled
    AFTER every timing (CUPTI lingers: probes.step.measure.kernels); `real_lengths` as the point was timed with."""
    if row.status != "ok" or session.device.type != "cuda":
        return row

    def profile_it():
        busy = session.busy_frac(session.step(row.batch_size, row.seq_len, real_lengths=real_lengths), row.step_s)
        return dataclasses.replace(row, gpu_busy_frac=busy, launch_bound=busy < kernels.LAUNCH_BOUND_BELOW)

    return oom_guard(session, profile_it, lambda msg: dataclasses.replace(row, status=f"profiler {msg}"))
