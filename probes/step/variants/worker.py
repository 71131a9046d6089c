"""One measurement of one step (a checkpoint, a shape, a variant) in a fresh process.

`python -m probes.step.variants.worker SPEC.json OUT.json`: reads the Spec and writes the Measurement as JSON
(probes.step.variants.measurement, which resolves the Spec's variant by name); builds the model through the
harness's contract with the variant's changes (probes.step.variants.catalog), seeds torch with the spec's seed
(the same random weights and batch in every process), times the step (probes.step.measure.timing), then
profiles it AFTER every timing (CUPTI lingers: probes.step.measure.kernels) for gpu_busy_frac and the attention
backends that ran. With `numerics_steps`, the adapters go back to their built values and the numerics price is
measured last (probes.step.variants.numerics). With `predict`, the profile is attributed to the step's modules
(probes.step.measure.attribution) and the micro-benchmarks the what-if predictions need run last
(probes.step.variants.microbench). A CUDA out-of-memory is a result with its status, never a crash.
probes.step.variants.processes starts these.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import json
import sys
import time
from pathlib import Path

import torch

from probes.result import InputError
from probes.step import harness as reference
from probes.step.measure import attribution, flops, kernel_watch, kernels
from probes.step.measure.timing import time_steps
from probes.step.train import contract, lora_targets, models, params
from probes.step.train.checkpoint import load_text_config
from probes.step.variants import catalog, libvariants, microbench, numerics
from probes.step.variants.measurement import INPUT_ERROR, Measurement, Spec

_START = time.perf_counter()


def restart_clock() -> None:
    """A fork of probes.step.variants.preload's server starts here: its first stage counts from the fork."""
    global _START
    _START = time.perf_counter()


def prepare(model, variant: catalog.Variant, pieces: contract.Contract) -> dict:
    """The variant's changes to the built model (compiling happens at its first step); what a library changed."""
    if variant.adapter_dtype is not None:
        for p in model.parameters():
            if p.requires_grad:
                p.data = p.data.to(catalog.torch_dtype(variant.adapter_dtype))
    if pieces.gradient_checkpointing:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()  # as Trainer does; dropout is 0 in these configs, checkpointing needs it
    if variant.prepare is not None:
        variant.prepare(model)
    changes = libvariants.prepare_adapted(model, variant)
    if variant.compile:
        _eager_forward(model)
        for layer in reference._decoder_layers(model):
            layer.compile(**({"mode": variant.compile_mode} if variant.compile_mode else {}))
    return changes


def _eager_forward(model) -> None:
    """One short forward before compiling. transformers logs a kernel's reference fallback (fla,
    causal-conv1d) only outside dynamo, so a compiled model would run the slow path silently: this
    forward lets the worker's kernel_watch see it."""
    device = next(model.parameters()).device
    with torch.no_grad():
        model(input_ids=torch.ones(1, 8, dtype=torch.long, device=device), use_cache=False)


def build(
    spec: Spec, pieces: contract.Contract, variant: catalog.Variant, device: torch.device, changes: dict | None = None
):
    """The spec's model with the harness's LoRA and the variant's changes, as the worker measures it (public:
    benchmarks that time the step in pieces build it the same way); `changes` receives what a library changed."""
    changes = {} if changes is None else changes
    torch.manual_seed(spec.seed)
    model = models.build_model(Path(spec.checkpoint), weights=spec.weights, device=device)
    changes.update(libvariants.prepare_base(model, variant))
    model = lora_targets.apply(
        pieces.harness,
        pieces.apply_lora,
        reference.discover_target_parameters,
        model,
        rank=spec.lora_rank,
        alpha=spec.lora_alpha,
    )
    changes.update(prepare(model, variant, pieces))
    return model


def make_step(spec: Spec, model, pieces: contract.Contract, chunk: int, device: torch.device) -> models.TrainStep:
    """The spec's training step on its seeded random batch, its rows filled as spec.rows says."""
    batch = models.make_batch(
        vocab_size=model.config.vocab_size,
        batch_size=spec.batch_size,
        seq_len=spec.seq_len,
        device=device,
        seed=spec.seed,
        **models.row_fill(spec.rows, spec.batch_size, spec.seq_len),
    )
    rows = spec.variant.micro_batch
    if rows is not None:  # the same rows, `rows` at a time: TrainStep accumulates over a list
        batch = [{k: v[i : i + rows] for k, v in batch.items()} for i in range(0, spec.batch_size, rows)]
    return models.train_step(model, pieces.harness, batch, chunk_tokens=chunk, contract=pieces)


def _first_call_s(step, device: torch.device) -> float:
    """The first step alone (a compiled model compiles here), synchronised."""
    begin = time.perf_counter()
    step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() - begin


@contextlib.contextmanager
def _gc_watched():
    """Freeze the objects alive now (the built model) out of the collector, and record every collection.

    A long training run's model objects are old: its collections are young and short. A fresh process
    promotes the whole build through the generations during its first steps, and a full collection
    over a 4B PEFT model stalls the host for tens of ms, which a GPU-bound step pays as a bump of its
    time. Freezing gives the timed steps a long run's collector; the dict yielded keeps the evidence
    (`gc_during_timing`), filled as the block ends.
    """
    record: dict = {}
    pauses: list[tuple[int, float]] = []
    begun: list[float] = []

    def watch(phase: str, info: dict) -> None:
        if phase == "start":
            begun.append(time.perf_counter())
        elif begun:
            pauses.append((info["generation"], time.perf_counter() - begun.pop()))

    gc.collect()
    gc.freeze()
    gc.callbacks.append(watch)
    try:
        yield record
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
        record.update(
            collections=len(pauses),
            full_collections=sum(g == 2 for g, _ in pauses),
            pause_ms_total=1e3 * sum(s for _, s in pauses),
            pause_ms_max=1e3 * max((s for _, s in pauses), default=0.0),
        )


def _timed(spec: Spec, model, step, device: torch.device, out: Measurement) -> None:
    first_s = _first_call_s(step, device)
    with _gc_watched() as out.gc_during_timing:
        t = time_steps(
            step, device=device, warmup=max(0, spec.warmup_steps - 1), steps=spec.steps, max_steps=spec.max_steps
        )
    out.timings, out.step_s, out.mean_all_s = t.to_dict(), t.median_s, t.mean_all_s
    out.spread_pct, out.spread_all_pct, out.iqr_pct = 100 * t.spread, 100 * t.spread_all, 100 * t.iqr
    out.trustworthy, out.steps, out.warmup_steps = t.trustworthy, t.num_steps, t.num_warmup + 1
    out.peak_mem_bytes = models.peak_mem_bytes(device)
    out.optimizer = out.harness_step["optimizer_class"] = contract.optimizer_class(step.optimizer)
    if spec.variant.compile:
        out.compile_s = first_s - t.median_s
        out.graph_breaks, out.graph_break_reasons = _graph_breaks()


def _graph_breaks() -> tuple[int, list[str]]:
    """Dynamo's graph breaks in this process so far (its counters: every compiled region's first steps), and the
    commonest reasons, each cut to a line: a library's kernels that dynamo cannot trace split a compiled layer."""
    from torch._dynamo.utils import counters

    breaks = counters["graph_break"]
    reasons = [f"{n} x {(reason.splitlines() or [''])[0][:160]}" for reason, n in breaks.most_common(5)]
    return sum(breaks.values()), reasons


def _profiled(spec: Spec, model, step, device: torch.device, out: Measurement) -> None:
    with attribution.scopes(model) if spec.predict else contextlib.nullcontext():
        prof = kernels.profile_steps(step, device=device, num_steps=spec.profile_steps)
    out.attention_backends = attribution.backends(prof)
    out.kernel_s_per_step = prof.kernel_s_per_step
    if device.type == "cuda":
        out.gpu_busy_frac = kernels.busy_per_step_s(prof) / out.step_s
    out.kernel_table = [dataclasses.asdict(r) for r in kernels.kernel_table(prof)]
    if spec.predict:
        out.attributed_s = attribution.attribute(prof)


def measure(spec: Spec) -> Measurement:
    """Every figure of one process; an OOM gives status "oom while ..."."""
    device = models.pick_device(spec.device)
    harness = reference.load_harness(spec.harness)
    variant = spec.variant
    pieces = variant.contract(contract.resolve(harness))
    out = Measurement(
        variant=variant,
        caveat=variant.caveat,
        harness_step=pieces.describe(),
        harness_fallbacks=list(pieces.fallbacks),
        harness_env=contract.fingerprint(harness),
    )
    chunk = spec.ce_chunk if variant.ce_chunk is None else variant.ce_chunk
    if variant.ce_chunk is not None and "chunk_tokens" not in _loss_params(harness):
        return dataclasses.replace(out, status=f"not applicable: {spec.harness}.compute_loss takes no chunk_tokens")
    model_type = load_text_config(Path(spec.checkpoint)).model_type
    if (why := libvariants.not_applicable(variant, device, model_type, spec.batch_size)) is not None:
        return dataclasses.replace(out, status=why)
    stage, clock, logged = ["loading"], _Stages(out), []
    out.kernel_packages = kernel_watch.installed()
    try:
        with kernel_watch.watch(logged):  # the reference fallbacks transformers logs in this process
            _measured(spec, pieces, device, chunk, out, clock, stage)
    except catalog.NotApplicable as exc:  # found once the harness's pieces are built (its optimizer)
        out.status = f"not applicable: {exc}"
    except Exception as exc:
        if not models.is_oom(exc):
            raise
        out.status = f"oom while {stage[0]}: {_first_line(exc)}"
    out.kernel_fallbacks = kernel_watch.fallbacks(logged)
    return out


def _first_line(exc: BaseException) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:100]


def _numerics(spec: Spec, model, built: list, pieces: contract.Contract, chunk: int, device: torch.device) -> dict:
    """The numerics price (probes.step.variants.numerics): the gradient probe, then the curve, each from the adapter
    weights at build with a fresh optimizer."""
    trained = [p for p in model.parameters() if p.requires_grad]

    def fresh_step(probe: bool) -> models.TrainStep:
        with torch.no_grad():
            for p, value in zip(trained, built):
                p.copy_(value)
        if probe:
            numerics.perturb_lora_b(model, spec.seed)
        return make_step(spec, model, pieces, chunk, device)

    folder = Path(spec.numerics_dir) if spec.numerics_dir else None
    is_baseline = spec.variant.name == catalog.BASELINE
    loss, grads = numerics.probe_gradients(fresh_step(probe=True), model)
    record = numerics.probe(
        loss,
        grads,
        reference=None if folder is None or is_baseline else folder / "baseline_grad.pt",
        save=folder / "baseline_grad.pt" if folder is not None and is_baseline and spec.predict else None,
    )
    return {**numerics.curve(fresh_step(probe=False), spec.numerics_steps), **record}


def _measured(spec: Spec, pieces, device: torch.device, chunk: int, out: Measurement, clock, stage: list) -> None:
    """Build, time, profile (then the numerics price, and with `predict` the micro-benchmarks) into
    `out`; `stage[0]` says how far it got (an OOM's status names it)."""
    model = build(spec, pieces, spec.variant, device, changes := {})
    out.library_changes = changes or None
    built = [p.detach().to("cpu", copy=True) for p in model.parameters() if p.requires_grad]
    clock("build")
    out.params_total, out.params_trainable = models.count_params(model)
    out.params_active = round(params.count(model).params_active)
    out.lora_targets = lora_targets.describe(model)
    shape = flops.model_shape(model)
    out.step_flops = flops.step_flops(shape, batch_size=spec.batch_size, seq_len=spec.seq_len)
    step = make_step(spec, model, pieces, chunk, device)
    stage[0] = "timing"
    _timed(spec, model, step, device, out)
    stage[0] = clock("timing") or "profiling"
    _profiled(spec, model, step, device, out)
    clock("profiling")
    if spec.numerics_steps:
        stage[0] = "numerics"
        out.numerics = _unless_oom(
            out, "numerics", device, lambda: _numerics(spec, model, built, pieces, chunk, device)
        )
        clock("numerics")
    if spec.predict:
        stage[0] = "micro-benchmarks"
        del step
        models.release(device)
        out.microbench = _unless_oom(
            out, "micro-benchmarks", device, lambda: microbench.run(model, pieces, spec, device, chunk)
        )
        clock("micro-benchmarks")


def _unless_oom(out: Measurement, stage: str, device: torch.device, work):
    """`work()`, or None with the reason in out.not_measured when it runs out of memory: a stage after the
    timing (the numerics' fresh optimizer, the micro-benchmarks' shapes) can need more than the step, and
    its OOM is no reason to throw away the step time measured before it."""
    try:
        return work()
    except Exception as exc:
        if not models.is_oom(exc):
            raise
        why = f"oom: {_first_line(exc)}"
    models.release(device)  # outside the except: its traceback no longer holds the failed stage's tensors
    out.not_measured = {**(out.not_measured or {}), stage: why}
    return None


class _Stages:
    """Seconds of each stage, stored in out.stage_s (the first one counts from this module's
    import, after torch's, or from the fork; the parent's `process_wall_s` is the whole process)."""

    def __init__(self, out: Measurement):
        self.out, self.last = out, _START
        out.stage_s = {}

    def __call__(self, name: str) -> None:
        now = time.perf_counter()
        self.out.stage_s[name] = round(now - self.last, 2)
        self.last = now


def _loss_params(harness) -> tuple[str, ...]:
    return tuple(inspect.signature(harness.compute_loss).parameters)


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    spec = Spec.from_json(Path(spec_path).read_text())
    try:
        answer = measure(spec).to_json()
    except InputError as exc:  # bad input found only here (weights that do not load): the parent's to raise
        answer = json.dumps({INPUT_ERROR: str(exc)})
    Path(out_path).write_text(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
