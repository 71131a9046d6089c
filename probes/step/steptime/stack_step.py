"""A stack's measured step against the baseline's: the factor `goodput` scales its step-time model by to price
hours with the stack, and `replay` scales its prediction by to check that price.

The rows come typed (a MeasuredRun) from the contract of the probe that measured them: `carrier`'s (a row per
model and variant, and their numerics verdicts) or `profile --variant`'s (one model): this module names no
probe's table. Both rows come from the same run, at the same shape (batch_size x seq_len), each in fresh
processes (probes.step.variants.processes): their ratio is the stack's saving at that shape, applied to every
batch shape the step model prices. The ratio is of mean step times where the rows give them (carrier's
`mean_step_s`): hours are a sum of steps, priced from means, and the fits goodput scales are of means too.
Whether it holds at the corpus's other shapes (narrow, launch-bound batches) is what `replay --variant`
measures. A compiled stack's one-off compiles (a few graphs a job, each about its `compile_s`) are not in the
factor: replay pays them in its warm-up and says how many (`graphs_compiled`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from types import ModuleType

from probes.result import InputError, read_json_file
from probes.step import choices
from probes.step.steptime.model import SETUP_KEYS, StepModel
from probes.step.variants.names import BASELINE

UNTRUSTWORTHY = "not trustworthy"
"""How carrier's status of a row that measured, but not within its limits, begins (probes.carrier.probe)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasuredStep:
    """One variant's step of one model, as the run measured it (a producer's contract reads it off its row)."""

    model: str
    variant: str
    status: str = "ok"
    """ok, carrier's `not trustworthy (...)` (measured, priced and flagged), or why it did not measure."""
    step_s: object = None
    """The median step, seconds (as the file gives it: a garbled value is no step, see `step_time`)."""
    mean_step_s: object = None
    """The mean of every timed step after warm-up, seconds (carrier's; None where the producer gives none)."""
    tokens_per_step: object = None
    trustworthy: object = None
    """True: spreads within 2%."""
    launch_bound: object = None

    def step_time(self, columns: tuple[str, ...] = ("mean_step_s", "step_s")) -> float | None:
        """The step time in the first of `columns` that holds one: a finite number > 0 from a row that ran (ok,
        or `not trustworthy (...)`, which goodput prices and flags); None for a failed, skipped or garbled row."""
        if not (self.status == "ok" or self.status.startswith(UNTRUSTWORTHY)):
            return None
        for column in columns:
            value = getattr(self, column)
            if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
                return float(value)
        return None

    @property
    def gpu_bound_within_limits(self) -> bool:
        """Trustworthy (spread within 2%) and not launch-bound: carrier's `trustworthy` covers the spread
        alone, and a launch-bound row's saving is the host CPU's as much as the stack's."""
        return self.trustworthy is True and self.launch_bound is not True


STEP_COLUMNS = ("mean_step_s", "step_s")


@dataclasses.dataclass(frozen=True, kw_only=True)
class MeasuredRun:
    """A run's measured steps as the stack's factor reads them, whichever probe measured them."""

    steps: tuple[MeasuredStep, ...]
    verdicts: dict[str, dict[str, bool | None]] = dataclasses.field(default_factory=dict)
    """model -> variant -> its numerics `within_tolerance` (None: not measured); a model absent: no numerics."""
    batch_size: int | None = None
    seq_len: int | None = None
    """The shape every row was measured at (the run's config), when it gives one."""
    rows: str = "full"
    """How the measured rows were filled (carrier's --rows): full (unmasked) or packed (masked)."""
    setup: dict = dataclasses.field(default_factory=dict)
    """The run's SETUP_KEYS (harness, LoRA rank, CE chunk, card)."""
    source: str

    def __post_init__(self):
        if self.rows not in choices.ROWS:
            raise InputError(f"{self.source}: config.rows is {self.rows!r}, not {' or '.join(choices.ROWS)}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StackStep:
    stack: str
    model: str
    step_s: float
    baseline_step_s: float
    tokens_per_step: int | None
    batch_size: int | None = None
    seq_len: int | None = None
    """The shape both rows were measured at (the run's config), when its file gives it."""
    rows: str = "full"
    """How the measured rows were filled (carrier's --rows): full (unmasked) or packed (masked)."""
    trustworthy: bool
    """Both rows measured with spreads within 2% (their `trustworthy`) and neither launch-bound."""
    within_tolerance: bool | None
    """The stack's numerics price within tolerance (carrier's `numerics` table); None: not measured."""
    numerics_measured: bool = False
    """The run priced numerics for this model: a stack there without a verdict did not run them."""
    source: str
    setup: dict = dataclasses.field(default_factory=dict)
    """The run's SETUP_KEYS its file names (harness, LoRA rank, CE chunk, card)."""

    @property
    def factor(self) -> float:
        """The stack's step time over the baseline's: below 1 is faster."""
        return self.step_s / self.baseline_step_s

    def describe(self) -> str:
        shape = f" at {self.tokens_per_step:,} tokens a step" if self.tokens_per_step else ""
        return (
            f"stack {self.stack} x{self.factor:.4f} ({self.step_s:.4g} s vs baseline {self.baseline_step_s:.4g} s"
            f"{shape}, {self.model}, {self.source})"
        )


def _model_rows(run: MeasuredRun, prefer: str | None) -> tuple[str, dict[str, MeasuredStep]]:
    """The rows of one model, by variant: `prefer` if the run has it, else the run's only model."""
    by_model: dict[str, dict[str, MeasuredStep]] = {}
    for r in run.steps:
        if r.variant in by_model.setdefault(r.model, {}):  # two runs pasted together: which one priced is a guess
            raise InputError(f"{run.source}: two rows of {r.model}, variant {r.variant!r}")
        by_model[r.model][r.variant] = r
    if prefer in by_model:
        return prefer, by_model[prefer]
    if len(by_model) == 1:
        return next(iter(by_model.items()))
    which = (
        f"none of them {prefer!r}"
        if prefer
        else "and no checkpoint named to choose one by (--checkpoint: the model's folder)"
    )
    raise InputError(f"{run.source}: rows of {len(by_model)} models ({', '.join(sorted(by_model))}), {which}")


FACTOR_RANGE = (1e-3, 1e3)
"""A stack's step over the baseline's outside this is no measurement of one model's step (a garbled file)."""


def _pair(rows: dict[str, MeasuredStep], stack: str, source: str) -> tuple[float, float]:
    """The baseline's and the stack's step, from the one column both give (a mean over a median would
    price the stack by how skewed its steps are), their ratio checked."""
    for name in (BASELINE, stack):
        _measured(rows.get(name), name, rows, source)
    column = next((c for c in STEP_COLUMNS if all(rows[n].step_time((c,)) for n in (BASELINE, stack))), None)
    if column is None:
        raise InputError(
            f"{source}: {stack!r} and the baseline give no step time in one column ({', '.join(STEP_COLUMNS)})"
        )
    base_s, stack_s = (rows[n].step_time((column,)) for n in (BASELINE, stack))
    factor = stack_s / base_s
    if not FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]:
        raise InputError(
            f"{source}: the {column} of {stack!r} is x{factor:.3g} the baseline's ({stack_s:.4g} s vs {base_s:.4g} s): "
            f"no measured stack is outside x{FACTOR_RANGE[0]:g}-x{FACTOR_RANGE[1]:g}"
        )
    return base_s, stack_s


def _measured(row: MeasuredStep | None, name: str, known: dict, source: str) -> None:
    if row is None:
        raise InputError(f"{source}: no row for {name!r} (measured: {', '.join(known)})")
    if row.step_time() is None:
        raise InputError(f"{source}: {name!r} has no measured step_s (status: {row.status}, step_s: {row.step_s})")


def _fastest(rows: dict[str, MeasuredStep], within: dict[str, bool | None], model: str, source: str) -> str:
    """The fastest row measured ok whose numerics are within tolerance where the run priced any (carrier's own
    advice: the fastest within it); where it priced them, a row without a verdict did not run them."""
    verdicts = (True,) if within else (True, None)
    ok = [
        r for r in rows.values() if r.status == "ok" and r.step_time() is not None and within.get(r.variant) in verdicts
    ]
    if not ok:
        why = (
            "no row's numerics ran (the baseline's among them)"
            if within and all(v is None for v in within.values())
            else "none measured ok and within the numerics tolerance"
        )
        raise InputError(f"{source}: no row of {model} to take: {why}; name one with --stack")
    return min(ok, key=MeasuredStep.step_time).variant


def choose(
    run: MeasuredRun, stack: str | None, prefer_model: str | None = None, *, only_model: str | None = None
) -> StackStep:
    """The stack's step and the baseline's from `run`; `stack` None: the fastest measured ok within the numerics
    tolerance. `prefer_model`: the model whose rows to take when the run holds several; `only_model`: the model
    the rows must be of (replay knows the model it runs). InputError on no baseline or no measured row."""
    model, rows = _model_rows(run, only_model or prefer_model)
    if only_model is not None and model != only_model:  # another model's saving is no price of this one's step
        raise InputError(f"{run.source}: rows of {model} only, none of {only_model!r}, the model this prices")
    within = run.verdicts.get(model, {})
    # a named `stack` comes canonical, as carrier stores it (goodput's and replay's Configs)
    stack = stack if stack is not None else _fastest(rows, within, model, run.source)
    baseline_s, stack_s = _pair(rows, stack, run.source)
    tokens = rows[stack].tokens_per_step
    return StackStep(
        stack=stack,
        model=model,
        step_s=stack_s,
        baseline_step_s=baseline_s,
        tokens_per_step=tokens if type(tokens) is int else None,
        batch_size=run.batch_size,
        seq_len=run.seq_len,
        rows=run.rows,
        trustworthy=all(rows[name].gpu_bound_within_limits for name in (stack, BASELINE)),
        within_tolerance=within.get(stack),
        numerics_measured=bool(within),
        source=run.source,
        setup=run.setup,
    )


def read(path: Path, stack: str | None, sources: tuple[ModuleType, ...], prefer_model: str | None = None, *,
         only_model: str | None = None) -> StackStep:  # fmt: skip
    """`choose` over the run in a `--json` file, read by the first of `sources` that finds its rows there: each a
    producing probe's contract module, with `measured_run(result, source) -> MeasuredRun | None` and
    `STACKS_FROM` (what of its output measures stacks, for the error when none does)."""
    result = read_json_file(path, "carrier/profile JSON")
    run = next((found for s in sources if (found := s.measured_run(result, str(path))) is not None), None)
    if run is None:
        raise InputError(f"{path}: no stack measured (needs {' or '.join(s.STACKS_FROM for s in sources)})")
    return choose(run, stack, prefer_model, only_model=only_model)


def setup_differences(mine: dict, other: dict) -> list[str]:
    """Each SETUP_KEY both name with different values, as `key A vs B` (A: the file's, B: the other's); keys
    one side lacks are not compared (an older file, a typed-in fit)."""
    return [f"{key} {mine[key]!r} vs {other[key]!r}" for key in SETUP_KEYS if key in mine and key in other
            and not _same(mine[key], other[key])]  # fmt: skip


def _same(a, b) -> bool:
    """Equal, a bool never equal to a number (True == 1 in Python; a rank of True is no rank of 1)."""
    return (type(a) is bool) == (type(b) is bool) and a == b


def refuse_stacked_profile(model: StepModel) -> None:
    """A stack's factor scales a baseline's step model: a fit measured with a variant is refused."""
    if model.variant is not None:
        raise InputError(
            f"{model.source}: measured with variant {model.variant!r}; --stack-json scales a baseline profile "
            "(measured without --variant), or the stack would count twice"
        )
