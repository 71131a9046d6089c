"""`goodput`: the hours a training run will really take on this corpus, host and model.

For a corpus (its lengths), each batching strategy (probes.corpus.batching: fixed, longest, sorted,
bucket, packed) and a step-time model of one host x checkpoint (the `profile` probe's fit, read from
its `--json` output or the store, or terms given here), the predicted time of an epoch, the goodput
(real, non-padding tokens per second) and the projected hours for the lab's budget (tokens a job,
arms, seeds: cluster.yaml's `budget`, the default of every projection).

The step-time model (probes.step.steptime.model) is the profile's: step_s = quadratic * rows * width^2 +
linear * rows * width + fixed, over a batch of `rows` sequences padded to `width` tokens. Below the
fit's lengths a step is launch-bound (the host's launch time sets it, not a polynomial): there the
profile's measured launch-bound points are interpolated in tokens a step, and a step below all of
them takes the smallest one's time. A padded or packed batch carries an explicit attention mask; when
the fit was measured on maskless batches, such a batch is charged the profile's same-shape padding penalty.

Table `goodput`, one row per strategy: `num_batches`, `real_tokens`, `padded_tokens`,
`pad_fraction`, `epoch_s` (predicted, steady state), `goodput_tok_per_s` (real tokens over epoch_s),
`num_shapes` and `new_shapes_s` (the one-off cost of each batch shape's first step, once a job),
`outside_fit_time_pct` (the share of epoch_s from steps priced outside the fitted lengths and not
covered by a measured launch-bound point), `hours_per_job` (the budget's tokens at this goodput, plus new_shapes_s) and
`hours_sweep` (x arms x seeds: every arm priced as this model; goodput.sweep_hours sums arms
that are different models). Checks: `within_fitted_range` (no strategy takes more than 5% of its
time outside the fit) and `fit_gpu_bound` (the fit was built from GPU-bound points only).

With a stack (`--stack-json`: a `carrier --json` or `profile --variant ... --json` output, `--stack`: one of
its rows, unset: its fastest measured ok), every step time of the model is scaled by that stack's measured
step over the baseline's from the same run (probes.step.steptime.stack_step): the hours are those of training with
the stack. Only the steady steps scale: new_shapes_s, a one-off of the process at each new shape, is added
unscaled (a compiled stack also compiles a few graphs once a job, each about its compile_s: minutes, not in
these hours; replay pays them in its warm-up and counts them, docs/measurement.md), so a row's
hours_per_job = (its hours without the stack - new_shapes_s/3600) x factor + new_shapes_s/3600. The
summary says what priced them (`priced_with`: the best batching and the stack), the factor and where it was
measured, and the best strategy's hours without the stack (`baseline_hours_per_job`); check
`stack_trustworthy` says whether both rows were GPU-bound within 2% spreads, and the numerics verdict;
`stack_of_the_fits_model` whether the stack was measured on the model the profile fitted (when it names it;
its model also picks the stack file's rows when --checkpoint does not), `stack_of_the_fits_step` whether
through the same harness, LoRA rank and CE chunk and on the same card (those both files name). `replay
--variant` checks such a price on the GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from probes.carrier import contract as carrier_results
from probes.corpus import batching
from probes.goodput.config import Config
from probes.goodput.rows import Budget, GoodputRow
from probes.profile import contract as profile_results
from probes.result import Check, InputError, ProbeResult
from probes.step.steptime import stack_step
from probes.step.steptime.model import StepModel
from probes.step.train.checkpoint import model_name

STACK_SOURCES = (carrier_results, profile_results)
"""Whose `--json` output --stack-json reads a stack's measured step from, through its contract."""
OUTSIDE_FIT_LIMIT_PCT = 5.0
STACK_SHAPE_SHARE_PCT = 90.0
"""At least this share of the best strategy's priced time in batches like the stack's measured one (rows,
width, unmasked) for `stack_at_priced_shape` to pass."""
MAX_SHAPE_EPOCHS = 32
"""Epochs of a job enumerated for its distinct batch shapes (beyond, few shapes are new)."""


def hours(real_tokens_per_s: float, budget: Budget) -> float:
    """Hours of one job: the budget's real tokens at this goodput."""
    return budget.tokens_per_job / real_tokens_per_s / 3600.0


def sweep_hours(arm_hours: Sequence[float], budget: Budget) -> float:
    """Hours of the whole sweep: each arm's job hours times the seeds. One figure stands for every arm
    (a projection of one model); else one figure an arm (the arms are different models)."""
    if len(arm_hours) == 1:
        return arm_hours[0] * budget.num_arms * budget.num_seeds
    if len(arm_hours) != budget.num_arms:
        raise InputError(f"budget has {budget.num_arms} arms, got hours for {len(arm_hours)}")
    return float(sum(arm_hours)) * budget.num_seeds


def step_model(config: Config) -> StepModel:
    if config.profile is not None:
        model = profile_results.read_step_model(config.profile)
        given = config.new_shape_s is not None  # 0 too: replay's new_shape_s_confirmed may advise it
        return dataclasses.replace(model, new_shape_s=config.new_shape_s) if given else model
    floor = () if config.floor_s is None else ((0, config.floor_s),)
    return StepModel(
        quadratic_s=config.quadratic_s,
        linear_s=config.linear_s,
        fixed_s=config.fixed_s,
        min_len=config.fit_min_len,
        max_len=config.fit_max_len or config.max_length,
        fit_batch_size=config.fit_batch_size,
        launch_points=floor,
        mask_penalty_pct=config.mask_penalty_pct,
        launch_bound_in_fit=config.fit_launch_bound,
        new_shape_s=config.new_shape_s or 0.0,
    )


def job_shapes(
    lengths: np.ndarray,
    strategy: str,
    *,
    batch_size: int,
    max_length: int,
    seed: int,
    bucket_size: int | None,
    tokens: int,
) -> int:
    """Distinct (rows, width) shapes of the batches a job of `tokens` real tokens runs, epoch after epoch
    (epoch e shuffled with seed + e; at most MAX_SHAPE_EPOCHS enumerated): a budget that ends inside an
    epoch meets only the shapes of the batches before its end."""
    shapes: set[tuple[int, int]] = set()
    left = tokens
    for e in range(MAX_SHAPE_EPOCHS):
        b = batching.make(
            strategy, lengths, batch_size=batch_size, max_length=max_length, seed=seed + e, bucket_size=bucket_size
        )
        reached = np.cumsum(b.real_tokens)
        n = min(int(np.searchsorted(reached, left)) + 1, b.num_batches)  # batches until the budget is spent
        shapes |= set(zip(b.rows[:n].tolist(), b.widths[:n].tolist()))
        left -= int(reached[n - 1]) if n else 0
        if left <= 0 or not b.num_batches or strategy in ("fixed", "sorted", "packed"):
            break  # those three meet the same shapes every epoch
    return len(shapes)


def price(
    batches: batching.Batches, model: StepModel, budget: Budget, bucket_size: int | None, num_shapes: int | None = None
) -> GoodputRow:
    """One strategy's epoch under the step model; num_shapes: the job's distinct shapes (unset: the epoch's)."""
    rows, widths, real = batches.rows, batches.widths, batches.real_tokens
    step_s = model.predict(rows, widths, batches.masked)
    epoch_s, real_total = float(step_s.sum()), int(real.sum())
    padded = int((rows * widths).sum()) - real_total
    outside = float(step_s[model.outside(rows, widths)].sum())
    if num_shapes is None:
        num_shapes = len(set(zip(rows.tolist(), widths.tolist())))
    once_s = num_shapes * model.new_shape_s
    job_h = hours(real_total / epoch_s, budget) + once_s / 3600
    return GoodputRow(
        strategy=batches.strategy,
        bucket_size=bucket_size,
        num_batches=batches.num_batches,
        real_tokens=real_total,
        padded_tokens=padded,
        pad_fraction=padded / (padded + real_total),
        epoch_s=epoch_s,
        goodput_tok_per_s=real_total / epoch_s,
        num_shapes=num_shapes,
        new_shapes_s=once_s,
        outside_fit_time_pct=100 * outside / epoch_s,
        hours_per_job=job_h,
        hours_sweep=sweep_hours([job_h], budget),
    )


def price_all(config: Config, lengths: np.ndarray, model: StepModel, budget: Budget, size: int | None) -> list:
    """A GoodputRow per strategy of config.strategies, priced under `model`."""
    kw = dict(batch_size=config.batch_size, max_length=config.max_length, seed=config.seed)
    return [
        price(
            batching.make(s, lengths, bucket_size=size, **kw),
            model,
            budget,
            size if s == "bucket" else None,
            job_shapes(lengths, s, bucket_size=size, tokens=budget.tokens_per_job, **kw) if model.new_shape_s else None,
        )
        for s in config.strategies
    ]


def with_stack(config: Config, model: StepModel) -> tuple[StepModel, stack_step.StackStep | None]:
    """The step model scaled by --stack-json's stack (the model as it is without one)."""
    if config.stack_json is None:
        return model, None
    if config.profile is not None:
        stack_step.refuse_stacked_profile(model)
    prefer = model_name(config.checkpoint) if config.checkpoint else model.model
    stack = stack_step.read(config.stack_json, config.stack, STACK_SOURCES, prefer_model=prefer)
    return model.scaled(stack.factor, f"{model.source}; {stack.describe()}"), stack


def run(config: Config) -> ProbeResult:
    data = config.load_lengths()
    plain = step_model(config)
    model, stack = with_stack(config, plain)
    clipped = np.minimum(data.length, config.max_length)
    budget = Budget(config.token_budget or int(clipped.sum()), config.num_arms, config.num_seeds)
    size = batching.bucket_size_for(config, data)
    rows = price_all(config, data.length, model, budget, size)
    # the fewest hours, one-offs included: the steady goodput alone picks a batching whose many shapes each
    # pay new_shape_s (goodput ties break by it)
    best = min(rows, key=lambda r: (r.hours_per_job, -r.goodput_tok_per_s))
    summary = {
        "num_samples": data.num_samples,
        "lengths_from": data.origin,
        "step_model": model.source,
        "fit_lens": [model.min_len, model.max_len],
        "fit_batch_size": model.fit_batch_size,
        "launch_points": [list(p) for p in model.launch_points],
        "mask_penalty_pct": model.mask_penalty_pct,
        "budget_tokens_per_job": budget.tokens_per_job,
        "budget_arms": budget.num_arms,
        "budget_seeds": budget.num_seeds,
        "best_strategy": best.strategy,
        "best_goodput_tok_per_s": best.goodput_tok_per_s,
        "best_hours_per_job": best.hours_per_job,
        "best_hours_sweep": best.hours_sweep,
        "stack": stack.stack if stack else None,
        "priced_with": f"{_batching(best)}, " + (f"stack {stack.stack}" if stack else "the harness as it is"),
    }
    cut = data.length[data.length > config.max_length]
    lost = int((cut - config.max_length).sum())
    summary |= {  # what --max-length cuts off: tokens no strategy prices and no job trains
        "truncated_samples": int(cut.size),
        "truncated_tokens": lost,
        "truncated_tokens_pct": 100 * lost / max(1, int(data.length.sum())),
    }
    found = checks(rows, model, given=config.profile is None)
    if stack:
        baseline = next(r for r in price_all(config, data.length, plain, budget, size) if r.strategy == best.strategy)
        summary |= _stack_summary(stack, baseline)
        found += [
            _stack_check(stack),
            _numerics_check(stack),
            _same_model_check(stack, plain),
            _same_setup_check(stack, plain),
            _stack_shape_check(stack, config, data.length, best, model),
        ]
    return ProbeResult(probe="goodput", config=config, tables={"goodput": rows}, summary=summary, checks=found)


def _batching(row: GoodputRow) -> str:
    """The batching that priced the hours, with the bucket size (the bucket probe's pick when none was given)."""
    return f"{row.strategy} batching" + (f" (bucket size {row.bucket_size})" if row.bucket_size else "")


def _stack_summary(stack: stack_step.StackStep, baseline: GoodputRow) -> dict:
    """What the stack changes: its factor, its provenance, and the best strategy's hours without it."""
    return {
        "stack_step_factor": stack.factor,
        "stack_step_s": stack.step_s,
        "stack_baseline_step_s": stack.baseline_step_s,
        "stack_tokens_per_step": stack.tokens_per_step,
        "stack_model": stack.model,
        "stack_from": stack.source,
        "stack_within_tolerance": stack.within_tolerance,
        "baseline_hours_per_job": baseline.hours_per_job,
        "baseline_hours_sweep": baseline.hours_sweep,
    }


def _stack_check(stack: stack_step.StackStep) -> Check:
    return Check(
        name="stack_trustworthy",
        ok=stack.trustworthy,
        detail=(
            f"{stack.stack} and the baseline measured GPU-bound within 2% spreads"
            if stack.trustworthy
            else f"{stack.stack} or the baseline not trustworthy in {stack.source} (launch-bound or spread above 2%)"
        ),
    )


def _numerics_check(stack: stack_step.StackStep) -> Check:
    """Hours priced with a stack whose numerics are outside tolerance are hours of another training: priced
    and shown (the lab may accept the price), but never passed as if the step were the same."""
    detail = {
        None: f"{stack.stack}'s numerics not measured in {stack.source}"
        + (" (its `numerics` table says why)" if stack.numerics_measured else ""),
        True: f"{stack.stack}'s numerics within tolerance",
        False: f"{stack.stack}'s numerics OUTSIDE tolerance (its `numerics` table): these hours train otherwise",
    }[stack.within_tolerance]
    # a file that measured no numerics (profile --variant) says nothing against the stack; one that measured
    # the others' and not this one's (out of memory) leaves these hours unvouched for
    unknown = stack.within_tolerance is None and stack.numerics_measured
    ok = stack.within_tolerance is not False and not unknown
    return Check(name="stack_numerics_within_tolerance", ok=ok, detail=detail)


def _stack_shape_check(
    stack: stack_step.StackStep, config: Config, lengths: np.ndarray, best: GoodputRow, model: StepModel
) -> Check:
    """The stack's saving was measured at one shape and one row fill (carrier's --rows: full rows unmasked,
    packed rows masked); the best strategy's other batches may save otherwise, as packed rows did
    on an H100 (x0.479 replayed against x0.439 measured on full rows): the share of its predicted time in
    batches like the measured one says how far the price leans on that assumption; replay --variant
    measures it."""
    measured = (stack.batch_size, stack.seq_len)
    if None in measured:
        return Check(
            name="stack_at_priced_shape",
            ok=False,
            detail="the stack measured at a shape its file does not give: its saving assumed at every priced batch",
        )
    kw = dict(batch_size=config.batch_size, max_length=config.max_length, seed=config.seed)
    batches = batching.make(best.strategy, lengths, bucket_size=best.bucket_size, **kw)
    time_s = model.predict(batches.rows, batches.widths, batches.masked)
    masked = np.asarray(batches.masked, bool)
    like = (batches.rows == measured[0]) & (batches.widths == measured[1]) & (masked == (stack.rows != "full"))
    share = 100 * float(time_s[like].sum() / time_s.sum()) if time_s.sum() else 0.0
    ok = share >= STACK_SHAPE_SHARE_PCT
    kind = "full unmasked rows" if stack.rows == "full" else f"{stack.rows} rows (masked; any mask counts alike)"
    other = "masked (padded or packed)" if stack.rows == "full" else "unmasked"
    return Check(
        name="stack_at_priced_shape",
        ok=ok,
        detail=f"the stack measured at {measured[0]} x {measured[1]:,} tokens, {kind}; {share:.1f}% of "
        f"{best.strategy}'s priced time is in such batches"
        + (
            ""
            if ok
            else f" (the rest of other shapes or {other}): its saving assumed there; replay --variant checks it"
        ),
    )


def _same_model_check(stack: stack_step.StackStep, model: StepModel) -> Check:
    """The stack's saving was measured on the model the fit prices: another model's factor is no price of this one."""
    same = model.model is None or model.model == stack.model
    return Check(
        name="stack_of_the_fits_model",
        ok=same,
        detail=(
            f"the stack measured on {stack.model}, the fit on {model.model or 'a model the profile does not name'}"
            if same
            else f"the stack measured on {stack.model}, the fit on {model.model}: another model's saving priced"
        ),
    )


def _same_setup_check(stack: stack_step.StackStep, model: StepModel) -> Check:
    """The stack's saving was measured through one harness, LoRA rank and CE chunk: through another, the step
    it scales is another step (a fused loss saves nothing where the harness already chunks it)."""
    differ = stack_step.setup_differences(stack.setup, model.setup)
    compared = [k for k in stack_step.SETUP_KEYS if k in stack.setup and k in model.setup]
    if differ:
        detail = f"the stack and the fit measured through another step (stack vs fit): {'; '.join(differ)}"
    elif compared:
        detail = f"the stack and the fit measured through the same {', '.join(compared)}"
    else:
        named = [f"the {who} names {', '.join(setup)}" for who, setup in (("stack", stack.setup), ("fit", model.setup))
                 if setup]  # fmt: skip
        detail = (
            f"no harness, LoRA rank or CE chunk named by both ({'; '.join(named) or 'neither names one'}): not compared"
        )
    return Check(name="stack_of_the_fits_step", ok=not differ, detail=detail)


def checks(rows: list[GoodputRow], model: StepModel, given: bool = False) -> list[Check]:
    """`given`: the fit's terms were typed in, not read from a profile: its range and points are the giver's word."""
    outside = {
        r.strategy: round(r.outside_fit_time_pct, 1) for r in rows if r.outside_fit_time_pct > OUTSIDE_FIT_LIMIT_PCT
    }
    gpu_bound = model.launch_bound_in_fit is False
    fitted = "the given fit's lengths" if given else "the fitted lengths"
    return [
        Check(
            name="within_fitted_range",
            ok=not outside,
            detail=(
                f"share of predicted time outside {fitted} {model.min_len}-{model.max_len} "
                f"(and not covered by a measured launch-bound point) above {OUTSIDE_FIT_LIMIT_PCT:g}%: {outside}"
                if outside
                else f"every strategy priced within {fitted} {model.min_len}-{model.max_len} "
                f"or measured launch-bound points"
            ),
        ),
        Check(
            name="fit_gpu_bound",
            ok=gpu_bound,
            detail=(
                "given terms, GPU-bound by the giver's word (--fit-launch-bound says otherwise)"
                if gpu_bound and given
                else "the fit was built from GPU-bound points only"
                if gpu_bound
                else "the fit was built from launch-bound points: its step times measure the host's CPU"
                if model.launch_bound_in_fit
                else "not known whether the fit's points were launch-bound (a CPU profile has no device timeline)"
            ),
        ),
    ]
