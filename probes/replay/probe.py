"""`replay`: does goodput's prediction hold? The corpus's real batch shapes, run through the harness.

For each strategy (probes.corpus.batching), the first `--steps` batches of the epoch (further epochs
reshuffled with seed+1, seed+2, ... when one is shorter), in the order training feeds them: random
token ids at exactly each batch's row lengths, right-padded to its width with an explicit attention
mask where rows differ (as a collator pads), one optimizer step each through the harness's
train step (probes.step.train.models, the profile's session; AdamW shared across the replay as in training).
Each step is timed alone (probes.step.measure.timing: CUDA events, the end waited on, as a loop that logs its
loss does) after `--warmup-steps` untimed steps of the widest batches (the allocator's peak reached).

The prediction is goodput's step model (probes.step.steptime.model), either read from `--profile` or measured
in the same session first: `scaling` times a padded batch of `--batch-size` rows at each of
`--fit-lens` widths (one row half padding, so the mask is the replay's) and `fit` fits them as the
profile probe does (probes.step.steptime.fit), launch-bound points (GPU busy < 90%, profiled after every
timing) left out of the fit and interpolated below it. A fit point's `step_s` here is the MEAN of
its timed steps, not the median: a replay sums steps, and a launch-bound point's jitter is skewed.
The first step at a batch shape the process has not run yet costs more (on an H200, ~0.2 s: kernel
plans for the new shape, allocator growth), and a replay of a long-tailed corpus meets a new width
almost every step: the model's `new_shape_s` is the median excess of the fit points' first warm-up
step over their timed mean (each in `new_shape_fit_excess_s`), charged to every replayed step whose (rows,
width) is new (`new_shape`). The replay measures it a second way, `new_shape_replayed_s`: its new-shape
steps' mean excess over their steady prediction, less that prediction's miss on the same strategy's other
steps; check `new_shape_s_confirmed` fails where the two differ by
more than half (and 20 ms), naming the value to price with (goodput --new-shape-s).
A compiled stack also compiles a few more graphs (graph_warm_indices says which batches make it): those
batches run in the warm-up too, as a job pays its compiles once at its start.

Tables: `replay`, one row per strategy: `num_steps`, `real_tokens`, `padded_tokens`,
`predicted_s` and `measured_s` (sums over the replayed steps), `error_pct` ((predicted - measured)
/ measured), `predicted_tok_per_s` and `measured_tok_per_s` (real tokens over each);
`replay_steps`: every step's shape and both times; `scaling` and `fit` when measured here.
Check `replay_within_5pct`: |error_pct| <= 5 for every strategy (a GPU criterion: on the CPU, the
tests' tiny models time in milliseconds and the figure is not a promise).

With `--variant` (a variant or a stack), the model and every fitted and replayed step carry its changes as
carrier's worker applies them (probes.step.session). With `--profile` and `--stack-json` too, the
prediction is the profile's model scaled by the stack's measured step over the baseline's, exactly as
goodput prices hours with that stack: the replay checks that price (summary `stack_step_factor`).

The fit measured here and the step model read from --profile are in probes.replay.model.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import torch

from probes.carrier import contract as carrier_results
from probes.corpus import batching
from probes.corpus import lengths as corpus_mod
from probes.profile import contract as profile_results
from probes.replay import model as replay_model
from probes.replay.config import Config
from probes.replay.rows import ReplayRow, StepRow
from probes.result import Check, InputError, ProbeResult
from probes.step.measure.timing import time_steps
from probes.step.session import Session, oom_guard
from probes.step.steptime import stack_step
from probes.step.steptime.model import StepModel, setup_of
from probes.step.train import models
from probes.step.train.checkpoint import load_text_config, model_name
from probes.step.variants import libvariants, stacks
from probes.step.variants.names import BASELINE

LIMIT_PCT = 5.0
STACK_SOURCES = (carrier_results, profile_results)
"""Whose `--json` output --stack-json reads a stack's measured step from, through its contract."""


def _session(config: Config) -> Session:
    """The model session (model, LoRA, harness) the profile probe measures through, with --variant's changes:
    each fit point two warm-up steps, then --fit-steps timed ones (up to 3x while the spread is high)."""
    variant = None if config.variant is None else stacks.get(config.variant)
    return Session(config, warmup_steps=2, steps=config.fit_steps, max_steps=3 * config.fit_steps, variant=variant)


def _given(config: Config) -> tuple[StepModel | None, stack_step.StackStep | None]:
    """--profile's step model, scaled by --stack-json's --variant step as goodput scales it (None: fit here)."""
    given = replay_model.given_model(config.profile)
    runs = model_name(config.checkpoint)
    if given is not None and given.model is not None and given.model != runs:  # another model's fit predicts nothing
        raise InputError(f"{config.profile}: a fit of {given.model}, and this replay runs {runs} (--checkpoint)")
    if given is not None:  # a fit through another harness, rank or chunk predicts another step
        _same_step(config, config.profile, "profile", given.setup)
    if config.stack_json is None:
        _same_variant(config, given)
        return given, None
    stack_step.refuse_stacked_profile(given)
    name = stacks.get(config.variant).name
    stack = stack_step.read(config.stack_json, name, STACK_SOURCES, only_model=runs)
    _same_step(config, config.stack_json, "stack", stack.setup)  # another step's saving predicts nothing here
    return given.scaled(stack.factor, f"{given.source}; {stack.describe()}"), stack


def _same_step(config: Config, path, what: str, setup: dict) -> None:
    """A file measured through another harness, LoRA rank or CE chunk than this replay's is refused."""
    differ = stack_step.setup_differences(setup, setup_of(config))
    if differ:
        raise InputError(
            f"{path}: measured through another step than this replay's ({what} vs replay): " + "; ".join(differ)
        )


def _same_card(session: Session, *files) -> str:
    """The card this replay runs on ("cpu" off a GPU). A fit or a stack measured on another card predicts
    another card's steps: refused before the model loads. `files`: (path, StepModel or StackStep or None)
    pairs; one whose file names no card passes."""
    card = torch.cuda.get_device_name(session.device) if session.device.type == "cuda" else "cpu"
    for path, measured in files:
        theirs = None if measured is None else measured.setup.get("card")
        if theirs is not None and theirs != card:
            raise InputError(f"{path}: measured on {theirs}, and this replay runs on {card}")
    return card


def _same_variant(config: Config, given: StepModel | None) -> None:
    """Without --stack-json, --profile's model is the prediction as it is: it must have been measured with
    the variant replayed, or a stack's steps are compared with the baseline's prediction (or the reverse)."""
    if given is None:
        return
    replayed = None if config.variant in (None, BASELINE) else stacks.canonical(config.variant)
    measured = None if given.variant is None else stacks.canonical(given.variant)
    if measured != replayed:
        raise InputError(
            f"{config.profile}: measured with {measured or 'the baseline'}, "
            f"replayed with {replayed or 'the baseline'}; give --stack-json (the stack's measured step) to scale a baseline profile, or a profile of the same step"
        )


def shapes(config: Config, lengths: np.ndarray, strategy: str, bucket_size: int | None) -> list[np.ndarray]:
    """Row lengths of the first num_steps batches, epoch after epoch (seed, seed+1, ...)."""
    out: list[np.ndarray] = []
    seed = config.seed
    while len(out) < config.num_steps:
        epoch = batching.make(
            strategy,
            lengths,
            batch_size=config.batch_size,
            max_length=config.max_length,
            seed=seed,
            bucket_size=bucket_size,
        )
        out += [epoch.batch(i) for i in range(epoch.num_batches)]
        seed += 1
    return out[: config.num_steps]


def packed_segments(config: Config, lengths: np.ndarray) -> list[list[np.ndarray]]:
    """The sequences inside each row of the packed batches `shapes` gives (epochs repeat: packing does not
    shuffle), for models.make_batch's restarting positions."""
    epoch = batching.make("packed", lengths, batch_size=config.batch_size, max_length=config.max_length)
    pieces = batching.packed_segments(lengths, config.max_length)
    one = [pieces[a : a + n] for a, n in zip(epoch.starts, epoch.rows)]
    return (one * -(-config.num_steps // len(one)))[: config.num_steps]


def masked_batches(batches: list[np.ndarray], packed: bool) -> list[bool]:
    """Which batches carry an attention mask: padded ones, and every packed one (probes.corpus.batching)."""
    return [packed or bool(r.min() != r.max()) for r in batches]


def batch_widths(batches: list[np.ndarray], packed_width: int | None = None) -> list[int]:
    """Each batch's width in tokens: its longest row, or for packed batches the packing length (a packing
    collator pads every row to it, a last partial row too, and goodput prices every packed batch so)."""
    return [packed_width or int(r.max()) for r in batches]


def warm_indices(
    batches: list[np.ndarray], warmup: int, compiled: bool = False, packed_width: int | None = None
) -> list[int]:
    """The warm-up steps: the widest batches (the allocator's peak reached before any timing), then, for a
    compiled stack, the batches that make dynamo compile its other graphs (graph_warm_indices). `packed_width`:
    the batches are packed (batch_widths)."""
    widths = batch_widths(batches, packed_width)
    widest = np.argsort([-len(r) * w for r, w in zip(batches, widths)], kind="stable")[:warmup].tolist()
    masked = masked_batches(batches, packed=packed_width is not None)
    graphs = graph_warm_indices(batches, masked, widths) if compiled else []
    return widest + [i for i in graphs if i not in widest]


def graph_warm_indices(
    batches: list[np.ndarray], masked: list[bool] | None = None, widths: list[int] | None = None
) -> list[int]:
    """A compiled layer compiles one graph per kind of batch (padded or not, one row or more: each traces
    differently) and recompiles it once a width, then a row count, differs from the first it saw (after
    that the dimension is dynamic and every value reuses the graph; measured: 4 graphs for widths
    128, 96, 64, 80 and 6, 4, 1 rows, 7 with padded and unpadded batches of each). Per kind: its first
    batch, its first of another width, its first of another row count. A training job pays these compiles
    once; the replay pays them before timing, as it pays the allocator's growth."""
    masked = masked_batches(batches, packed=False) if masked is None else masked
    widths = batch_widths(batches) if widths is None else widths
    firsts: dict[tuple, int] = {}
    for i, rows in enumerate(batches):
        kind = (masked[i], len(rows) == 1)
        first = firsts.setdefault(kind, i)
        if widths[i] != widths[first]:
            firsts.setdefault((*kind, "width"), i)
        if len(rows) != len(batches[first]):
            firsts.setdefault((*kind, "rows"), i)
    return sorted(set(firsts.values()))


def graphs_compiled() -> int:
    """Graphs dynamo compiled in this process so far (a timed step that adds one paid a compile)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def recompile_limit_hits() -> int:
    """Times dynamo gave up compiling a function at its recompile_limit in this process: from then on that
    function runs eagerly for the new kind of batch, silently (a warning in the log, nothing else)."""
    from torch._dynamo.utils import counters

    return sum(n for msg, n in counters["unimplemented"].items() if "recompile limit" in msg.lower())


def time_replay(
    session: Session,
    batches: list[np.ndarray],
    warmup: int,
    segments: list | None = None,
    packed_width: int | None = None,
) -> Timed:
    """Each batch as one optimizer step, timed alone, after the warm-up steps (warm_indices); with the steps
    during which dynamo compiled a graph all the same (a compile the warm-up did not foresee). `segments`:
    packed batches, each row's sequences (packed_segments), every row `packed_width` tokens wide."""
    device, model = session.device, session.model
    packed_width = packed_width if segments is not None else None
    widths = batch_widths(batches, packed_width)
    built = [
        models.make_batch(
            vocab_size=session.vocab_size,
            batch_size=len(rows),
            seq_len=widths[i],
            device=device,
            seed=i,
            real_lengths=None if segments is not None or rows.min() == rows.max() else rows.tolist(),
            packed=None if segments is None else segments[i],
        )
        for i, rows in enumerate(batches)
    ]
    # The step the fit measured (the harness's contract: precision, optimizer, its own train_step),
    # with one optimizer shared across the replay, as in training.
    pieces = session.pieces
    optimizer = pieces.make_optimizer([p for p in model.parameters() if p.requires_grad])
    loss_fn = pieces.loss_fn(session.chunk)
    steps = [
        models.TrainStep(
            model, loss_fn, b, optimizer, autocast_dtype=pieces.autocast_dtype, harness_step=pieces.train_step
        )
        for b in built
    ]
    models.release(device)
    before, hits = graphs_compiled(), recompile_limit_hits()
    warm = warm_indices(batches, warmup, _compiles(session), packed_width)
    for i in warm:
        steps[i]()
    timed = Timed(times=[], warm=warm, compiled_in=[], warmup_graphs=graphs_compiled() - before, limit_hits=0)
    for i, step in enumerate(steps):
        before = graphs_compiled()
        timed.times.append(time_steps(step, device=device, warmup=0, steps=1).raw_s[0])
        timed.compiled_in += [i] if graphs_compiled() > before else []
    timed.limit_hits = recompile_limit_hits() - hits
    return timed


@dataclasses.dataclass
class Timed:
    """One strategy's replay: each step's seconds, the batches run in the warm-up, the steps during which
    dynamo compiled a graph, the graphs it compiled in the warm-up (a compiled stack's; 0 otherwise) and the
    times it hit its recompile_limit."""

    times: list[float]
    warm: list[int]
    compiled_in: list[int]
    warmup_graphs: int
    limit_hits: int


def _compiles(session: Session) -> bool:
    return session.variant is not None and session.variant.compile


def _rows(
    strategy: str,
    size: int | None,
    batches: list[np.ndarray],
    measured: list[float],
    model: StepModel,
    seen: set[tuple[int, int]],
    packed_width: int | None = None,
) -> tuple[ReplayRow, list[StepRow]]:
    """`seen`: shapes the process has run (updated): a step at a new one pays model.new_shape_s.
    `packed_width`: set for packed batches, the width of every one (batch_widths)."""
    rows = np.array([len(r) for r in batches])
    widths = np.array(batch_widths(batches, packed_width))
    real = np.array([int(r.sum()) for r in batches])
    masked = np.array(masked_batches(batches, packed=strategy == "packed"))
    new = np.array([not ((r, w) in seen or seen.add((r, w))) for r, w in zip(rows.tolist(), widths.tolist())])
    predicted = model.predict(rows, widths, masked) + new * model.new_shape_s
    steps = [
        StepRow(
            strategy=strategy,
            step=i,
            rows=int(rows[i]),
            width=int(widths[i]),
            real_tokens=int(real[i]),
            masked=bool(masked[i]),
            new_shape=bool(new[i]),
            predicted_s=float(predicted[i]),
            measured_s=measured[i],
        )
        for i in range(len(batches))
    ]
    p, m = float(predicted.sum()), float(sum(measured))
    return ReplayRow(
        strategy=strategy,
        bucket_size=size,
        num_steps=len(batches),
        real_tokens=int(real.sum()),
        padded_tokens=int((rows * widths).sum() - real.sum()),
        predicted_s=p,
        measured_s=m,
        error_pct=100 * (p - m) / m,
        predicted_tok_per_s=real.sum() / p,
        measured_tok_per_s=real.sum() / m,
    ), steps


def _tables(
    plans: dict, timed: dict, model: StepModel, size: int | None, seen: set[tuple[int, int]], packed_width: int
) -> tuple[list[ReplayRow], list[StepRow]]:
    """Rows of every strategy, in the order they ran (shapes run before, the warm-up's too, count as seen);
    `packed_width`: the packing length (config.max_length)."""
    replay_rows, step_rows = [], []
    for s, t in timed.items():
        bucket = size if s == "bucket" else None
        if isinstance(t, str):  # an out-of-memory: a row saying so
            replay_rows.append(
                ReplayRow(
                    strategy=s,
                    bucket_size=bucket,
                    num_steps=0,
                    real_tokens=0,
                    padded_tokens=0,
                    predicted_s=None,
                    measured_s=None,
                    error_pct=None,
                    predicted_tok_per_s=None,
                    measured_tok_per_s=None,
                    status=t,
                )
            )
            continue
        width = packed_width if s == "packed" else None
        widths = batch_widths(plans[s], width)
        seen |= {(len(plans[s][i]), widths[i]) for i in t.warm}
        row, steps = _rows(s, bucket, plans[s], t.times, model, seen, width)
        replay_rows.append(row)
        step_rows += steps
    return replay_rows, step_rows


def _type(config: Config) -> str:
    return load_text_config(config.checkpoint).model_type


def _failed(result: ProbeResult, name: str, message: str) -> ProbeResult:
    result.summary["status"] = message
    result.checks.append(Check(name=name, ok=False, detail=message))
    return result


def run(config: Config) -> ProbeResult:
    data = corpus_mod.load(
        corpus=config.corpus, lengths=config.lengths, checkpoint=config.checkpoint, cache_dir=config.cache_dir
    )
    size = batching.bucket_size_for(config, data)
    given, stack = _given(config)
    session = _session(config)
    result = ProbeResult(probe="replay", config=config)
    if session.variant is not None and (
        why := libvariants.not_applicable(session.variant, session.device, _type(config))
    ):
        return _failed(result, "variant_applicable", why)
    card = _same_card(session, (config.profile, given), (config.stack_json, stack))
    failed = oom_guard(session, session.load, lambda msg: msg.replace("oom:", "oom while loading:", 1))
    if failed:
        return _failed(result, "model_loaded", failed)
    result.summary["device"] = card
    # every timing first (fit points, then the replays), every profiler run after: CUPTI lingers
    # widest first: the allocator reaches its peak before the jittery launch-bound points are timed
    widest_first = [] if given else [replay_model.fit_point(session, w) for w in config.widths()[::-1]]
    points = sorted(widest_first, key=lambda r: r.seq_len)
    plans = {s: shapes(config, data.length, s, size) for s in config.strategies}
    segments = {"packed": packed_segments(config, data.length)} if "packed" in plans else {}
    timed = {
        s: oom_guard(
            session,
            lambda s=s, b=b: time_replay(session, b, config.warmup_steps, segments.get(s), config.max_length),
            lambda msg: msg,
        )
        for s, b in plans.items()
    }
    done = {s: t for s, t in timed.items() if not isinstance(t, str)}
    compiled = _compiles(session)
    model = given
    if not given:
        scaling, fit, model = replay_model.model_here(session, [replay_model.with_busy(session, r) for r in points])
        result.tables.update(scaling=scaling, fit=fit)
        if model is None:
            return _failed(result, "fit_has_3_points", f"fewer than 3 GPU-bound fit points: {list(config.widths())}")
    seen = set() if given else {(config.batch_size, w) for w in config.widths()}
    replay_rows, step_rows = _tables(plans, timed, model, size, seen, config.max_length)
    result.tables.update(replay=replay_rows, replay_steps=step_rows)
    result.summary.update(
        variant=config.variant,
        stack_step_factor=stack.factor if stack else None,
        step_model=model.source,
        fit_lens=[model.min_len, model.max_len],
        new_shape_s=model.new_shape_s,
        launch_points=[list(p) for p in model.launch_points],
        **{f"error_pct_{r.strategy}": r.error_pct for r in replay_rows},
        # a compiled stack's graphs, compiled in the warm-up; timed steps that compiled one all the same
        graphs_compiled=sum(t.warmup_graphs for t in done.values()) if compiled else None,
        **{f"compiled_in_steps_{s}": t.compiled_in for s, t in done.items() if compiled},
    )
    one_off_check = _one_off(result, step_rows, done, model, session.raw, None if given else points)
    result.artifacts["timings.json"] = json.dumps(session.raw, indent=1)
    result.checks += [_within_limit(replay_rows), one_off_check]
    if compiled:
        result.checks.append(_graphs_within_limit(sum(t.limit_hits for t in done.values())))
    return result


def _one_off(result: ProbeResult, step_rows: list, done: dict, model: StepModel, raw: dict, points) -> Check:
    """new_shape_s measured a second way from the replayed steps (those that compiled a graph left out) into
    the summary, with each fit point's excess when the fit was measured here (`points`), and its check."""
    compiled_steps = {(s, i) for s, t in done.items() for i in t.compiled_in}
    one_off, check = replay_model.new_shape_replayed(step_rows, compiled_steps, model.new_shape_s)
    if points:  # each fit point's excess, of which new_shape_s is the median
        one_off["new_shape_fit_excess_s"] = replay_model.new_shape_excess_s(
            raw, f"fit/{max(r.seq_len for r in points)}"
        )
    result.summary.update(one_off)
    return check


def _graphs_within_limit(hits: int) -> Check:
    import torch._dynamo

    limit = torch._dynamo.config.recompile_limit
    return Check(
        name="compiled_graphs_within_limit",
        ok=hits == 0,
        detail=(
            f"dynamo hit its recompile_limit ({limit}) {hits} time(s): those batches ran uncompiled, slower than "
            "the stack priced them (raise torch._dynamo.config.recompile_limit, or mark the dimensions dynamic)"
            if hits
            else f"every kind of batch compiled within dynamo's recompile_limit ({limit})"
        ),
    )


def _within_limit(replay_rows: list[ReplayRow]) -> Check:
    bad = {
        r.strategy: r.error_pct if r.status == "ok" else r.status
        for r in replay_rows
        if r.status != "ok" or abs(r.error_pct) > LIMIT_PCT
    }
    return Check(
        name="replay_within_5pct",
        ok=not bad,
        detail=(
            f"|predicted - measured| / measured above {LIMIT_PCT:g}% or not measured: {bad}"
            if bad
            else "; ".join(f"{r.strategy} {r.error_pct:+.2f}%" for r in replay_rows)
        ),
    )
