"""A stack's measured step against the baseline's, read from a `labprobe probe carrier --json` output
(table `carriers`, a row per model and variant) or a `labprobe probe profile --variant ... --json` one
(table `variants`, one model): the factor `goodput` scales its step-time model by to price hours with
the stack, and `replay` scales its prediction by to check that price.

Both rows come from the same run, at the same shape (batch_size x seq_len), each in fresh processes
(probes.step.variants.processes): their ratio is the stack's saving at that shape, applied to every batch shape
the step model prices. The ratio is of mean step times where the rows give them (carrier's `mean_step_s`):
hours are a sum of steps, priced from means, and the fits goodput scales are of means too. Whether it
holds at the corpus's other shapes (narrow, launch-bound batches) is what `replay --variant` measures. A compiled stack's one-off compiles (a few graphs a job, each about its
`compile_s`) are not in the factor: replay pays them in its warm-up and says how many (`graphs_compiled`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from probes.result import InputError, read_json_file
from probes.step.steptime.model import SETUP_KEYS, StepModel, card_of, setup_of
from probes.step.train import models
from probes.step.train.checkpoint import model_name

BASELINE = "baseline"
UNTRUSTWORTHY = "not trustworthy"
"""How carrier's status of a row that measured, but not within its limits, begins (probes.carrier.probe)."""


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
    """The file's `numerics` table has rows of this model: a stack there without a verdict did not run them."""
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


def _rows(result: dict, source: str) -> list[dict]:
    """Rows of (model, variant, step_s, tokens_per_step, trustworthy, status), carrier's or profile's."""
    tables = result.get("tables") if isinstance(result, dict) else None
    if not isinstance(tables, dict) or not (tables.get("carriers") or tables.get("variants")):
        raise InputError(
            f"{source}: no stack measured (needs table 'carriers' of carrier --json or 'variants' of profile --variant --json)"
        )
    name = "carriers" if tables.get("carriers") else "variants"
    if not isinstance(tables[name], list) or not all(isinstance(r, dict) for r in tables[name]):
        raise InputError(f"{source}: table {name!r} is not a list of rows")
    if name == "carriers":
        return tables[name]
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    checkpoint = config.get("checkpoint") or "profile"
    checkpoint = checkpoint[0] if isinstance(checkpoint, list) and checkpoint else checkpoint
    if not isinstance(checkpoint, str):
        raise InputError(f"{source}: config.checkpoint is {checkpoint!r}, not a checkpoint's path")
    model = model_name(checkpoint)
    return [{**r, "model": model, "tokens_per_step": r.get("tokens")} for r in tables[name]]


def _model_rows(rows: list[dict], prefer: str | None, source: str) -> tuple[str, dict[str, dict]]:
    """The rows of one model, by variant: `prefer` if the file has it, else the file's only model."""
    by_model: dict[str, dict[str, dict]] = {}
    for r in rows:
        model, variant = str(r.get("model")), str(r.get("variant"))
        if variant in by_model.setdefault(model, {}):  # two runs pasted together: which one priced would be a guess
            raise InputError(f"{source}: two rows of {model}, variant {variant!r}")
        by_model[model][variant] = r
    if prefer in by_model:
        return prefer, by_model[prefer]
    if len(by_model) == 1:
        return next(iter(by_model.items()))
    which = (
        f"none of them {prefer!r}"
        if prefer
        else "and no checkpoint named to choose one by (--checkpoint: the model's folder)"
    )
    raise InputError(f"{source}: rows of {len(by_model)} models ({', '.join(sorted(by_model))}), {which}")


STEP_COLUMNS = ("mean_step_s", "step_s")
FACTOR_RANGE = (1e-3, 1e3)
"""A stack's step over the baseline's outside this is no measurement of one model's step (a garbled file)."""


def _step_s(row: dict, columns: tuple[str, ...] = STEP_COLUMNS) -> float | None:
    """The row's step time when it measured one: its mean over every timed step (`mean_step_s`) where it
    gives one, else its `step_s`; a finite number > 0 from a row that ran (ok, or carrier's `not trustworthy
    (...)`, which goodput prices and flags); None for a failed, skipped or garbled row."""
    status = str(row.get("status", "ok"))
    if not (status == "ok" or status.startswith(UNTRUSTWORTHY)):
        return None
    for column in columns:
        value = row.get(column)
        if not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value) and value > 0:
            return float(value)
    return None


def _pair(rows: dict[str, dict], stack: str, source: str) -> tuple[float, float]:
    """The baseline's and the stack's step, from the one column both give (a mean over a median would
    price the stack by how skewed its steps are), their ratio checked."""
    for name in (BASELINE, stack):
        _measured(rows.get(name), name, rows, source)
    column = next((c for c in STEP_COLUMNS if all(_step_s(rows[n], (c,)) for n in (BASELINE, stack))), None)
    if column is None:
        raise InputError(
            f"{source}: {stack!r} and the baseline give no step time in one column ({', '.join(STEP_COLUMNS)})"
        )
    base_s, stack_s = (_step_s(rows[n], (column,)) for n in (BASELINE, stack))
    factor = stack_s / base_s
    if not FACTOR_RANGE[0] <= factor <= FACTOR_RANGE[1]:
        raise InputError(
            f"{source}: the {column} of {stack!r} is x{factor:.3g} the baseline's ({stack_s:.4g} s vs {base_s:.4g} s): "
            f"no measured stack is outside x{FACTOR_RANGE[0]:g}-x{FACTOR_RANGE[1]:g}"
        )
    return base_s, stack_s


def _measured(row: dict | None, name: str, known: dict, source: str) -> float:
    if row is None:
        raise InputError(f"{source}: no row for {name!r} (measured: {', '.join(known)})")
    step_s = _step_s(row)
    if step_s is None:
        raise InputError(
            f"{source}: {name!r} has no measured step_s (status: {row.get('status')}, step_s: {row.get('step_s')})"
        )
    return step_s


def read(path: Path, stack: str | None, prefer_model: str | None = None, *, only_model: str | None = None) -> StackStep:
    """The stack's step and the baseline's from a carrier or profile `--json` file; `stack` None: the
    fastest row measured ok whose numerics are within tolerance where the file measured any (carrier's own
    advice: the fastest within it). InputError on a missing or unreadable file, no baseline, or no measured row for the stack.
    `prefer_model`: the model whose rows to take when the file holds several; `only_model`: the model the
    rows must be of (replay knows the model it runs)."""
    result = read_json_file(path, "carrier/profile JSON")
    model, rows = _model_rows(_rows(result, str(path)), only_model or prefer_model, str(path))
    if only_model is not None and model != only_model:  # another model's saving is no price of this one's step
        raise InputError(f"{path}: rows of {model} only, none of {only_model!r}, the model this prices")
    within = _numerics(result, model, str(path))
    if stack is None:  # a named `stack` comes canonical, as carrier stores it (goodput's and replay's Configs)
        # where the file priced the numerics, a row without a verdict did not run them: not known within
        verdicts = (True,) if within else (True, None)
        ok = [
            r
            for r in rows.values()
            if r.get("status") == "ok" and _step_s(r) is not None and within.get(str(r.get("variant"))) in verdicts
        ]
        if not ok:
            why = (
                "no row's numerics ran (the baseline's among them)"
                if within and all(v is None for v in within.values())
                else "none measured ok and within the numerics tolerance"
            )
            raise InputError(f"{path}: no row of {model} to take: {why}; name one with --stack")
        stack = str(min(ok, key=_step_s)["variant"])
    baseline_s, stack_s = _pair(rows, stack, str(path))
    shape = result.get("config") if isinstance(result.get("config"), dict) else {}
    batch, seq = (v if type(v) is int else None for v in (shape.get("batch_size"), shape.get("seq_len")))
    return StackStep(
        stack=stack,
        model=model,
        step_s=stack_s,
        baseline_step_s=baseline_s,
        tokens_per_step=tokens if isinstance(tokens := rows[stack].get("tokens_per_step"), int) else None,
        batch_size=batch,
        seq_len=seq,
        rows=_rows_kind(shape, str(path)),
        trustworthy=all(_gpu_bound_within_limits(rows[name]) for name in (stack, BASELINE)),
        within_tolerance=within.get(stack),
        numerics_measured=bool(within),
        source=str(path),
        setup=setup_of(shape) | card_of(result),
    )


def _rows_kind(config: dict, source: str) -> str:
    """The config's `rows` (full where an older file names none); anything else is this file's error."""
    rows = config.get("rows", "full")
    if rows not in models.ROWS:
        raise InputError(f"{source}: config.rows is {rows!r}, not {' or '.join(models.ROWS)}")
    return rows


def setup_differences(mine: dict, other: dict) -> list[str]:
    """Each SETUP_KEY both name with different values, as `key A vs B` (A: the file's, B: the other's); keys
    one side lacks are not compared (an older file, a typed-in fit)."""
    return [f"{key} {mine[key]!r} vs {other[key]!r}" for key in SETUP_KEYS if key in mine and key in other
            and not _same(mine[key], other[key])]  # fmt: skip


def _same(a, b) -> bool:
    """Equal, a bool never equal to a number (True == 1 in Python; a rank of True is no rank of 1)."""
    return (type(a) is bool) == (type(b) is bool) and a == b


def _gpu_bound_within_limits(row: dict) -> bool:
    """Trustworthy (spread within 2%) and not launch-bound: carrier's `trustworthy` covers the spread
    alone, and a launch-bound row's saving is the host CPU's as much as the stack's."""
    return row.get("trustworthy") is True and row.get("launch_bound") is not True


def _numerics(result: dict, model: str, source: str) -> dict[str, bool | None]:
    """Each variant's `within_tolerance` in the file's `numerics` table (carrier's), for `model`."""
    table = result["tables"].get("numerics") or []
    if not isinstance(table, list) or not all(isinstance(r, dict) for r in table):
        raise InputError(f"{source}: table 'numerics' is not a list of rows")
    out: dict[str, bool | None] = {}
    for r in table:
        if r.get("model") != model:
            continue
        within = r.get("within_tolerance")
        if within not in (None, True, False):
            raise InputError(
                f"{source}: table 'numerics': {r.get('variant')}'s within_tolerance is {within!r}, "
                "not true, false or null"
            )
        out.setdefault(str(r.get("variant")), within)
    return out


def profile_variant(variant: object, source: str) -> str | None:
    """The variant or stack a `--profile` fit was measured with (its config `variant`, kept as the StepModel's
    `variant`: a replay's is a name), None for the baseline: a fit measured with a stack already prices the
    stack, and scaling it again counts it twice. A profile's `variant` is a list: the variants it measured
    beside its fit, which is the baseline's."""
    if variant in (None, BASELINE) or isinstance(variant, list):
        return None
    if not isinstance(variant, str):
        raise InputError(f"{source}: config.variant is {variant!r}, not a variant's name")
    return variant


def refuse_stacked_profile(model: StepModel) -> None:
    """A stack's factor scales a baseline's step model: a profile measured with a variant is refused."""
    variant = profile_variant(model.variant, model.source)
    if variant is not None:
        raise InputError(
            f"{model.source}: measured with variant {variant!r}; --stack-json scales a baseline profile (measured "
            "without --variant), or the stack would count twice"
        )
