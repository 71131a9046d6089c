"""A stack's measured step against the baseline's, read from a `labprobe probe carrier --json` output
(table `carriers`, a row per model and variant) or a `labprobe probe profile --variant ... --json` one
(table `variants`, one model): the factor `goodput` scales its step-time model by to price hours with
the stack, and `replay` scales its prediction by to check that price.

Both rows come from the same run, at the same shape (batch_size x seq_len), each in fresh processes
(probes.step.processes): their ratio is the stack's saving at that shape, applied to every batch shape
the step model prices. Whether it holds at the corpus's other shapes (narrow, launch-bound batches) is what
`replay --variant` measures. A compiled stack's one-off compiles (a few graphs a job, each about its
`compile_s`) are not in the factor: replay pays them in its warm-up and says how many (`graphs_compiled`).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from probes.result import FieldError, InputError, read_json_file
from probes.step import stacks
from probes.step.checkpoint import model_name

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
    trustworthy: bool
    """Both rows measured GPU-bound with spreads within 2% (carrier's and profile's `trustworthy`)."""
    within_tolerance: bool | None
    """The stack's numerics price within tolerance (carrier's `numerics` table); None: not measured."""
    source: str

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
    checkpoint = (result.get("config") or {}).get("checkpoint") or "profile"
    model = model_name(checkpoint[0] if isinstance(checkpoint, list) else checkpoint)
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


def _step_s(row: dict) -> float | None:
    """The row's step_s when it measured one: a finite number > 0 from a row that ran (ok, or carrier's
    `not trustworthy (...)`, which goodput prices and flags); None for a failed, skipped or garbled row."""
    step_s, status = row.get("step_s"), str(row.get("status", "ok"))
    if isinstance(step_s, bool) or not isinstance(step_s, (int, float)) or not math.isfinite(step_s) or step_s <= 0:
        return None
    return float(step_s) if status == "ok" or status.startswith(UNTRUSTWORTHY) else None


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
    fastest row whose status is ok (carrier's own choice of the fastest). InputError on a missing or
    unreadable file, no baseline, or no measured row for the stack. `prefer_model`: the model whose rows to take
    when the file holds several; `only_model`: the model the rows must be of (replay knows the model it runs)."""
    result = read_json_file(path, "carrier/profile JSON")
    model, rows = _model_rows(_rows(result, str(path)), only_model or prefer_model, str(path))
    if only_model is not None and model != only_model:  # another model's saving is no price of this one's step
        raise InputError(f"{path}: rows of {model} only, none of {only_model!r}, the model this prices")
    if stack is not None:  # carrier and profile store a stack under its canonical name: members sorted
        try:
            stack = stacks.canonical(stack)
        except FieldError as exc:  # an empty member, or baseline inside a stack: this field's error, not --variant's
            raise FieldError("stack", exc.message) from None
    else:
        ok = [r for r in rows.values() if r.get("status") == "ok" and _step_s(r) is not None]
        if not ok:
            raise InputError(f"{path}: no row of {model} measured ok to take the fastest from")
        stack = str(min(ok, key=_step_s)["variant"])
    baseline_s = _measured(rows.get(BASELINE), BASELINE, rows, str(path))
    stack_s = _measured(rows.get(stack), stack, rows, str(path))
    numerics = [
        r
        for r in result["tables"].get("numerics") or []
        if isinstance(r, dict) and r.get("variant") == stack and r.get("model") == model
    ]
    within = numerics[0].get("within_tolerance") if numerics else None
    shape = result.get("config") if isinstance(result.get("config"), dict) else {}
    batch, seq = (v if type(v) is int else None for v in (shape.get("batch_size"), shape.get("seq_len")))
    if within not in (None, True, False):
        raise InputError(f"{path}: table 'numerics': {stack}'s within_tolerance is {within!r}, not true, false or null")
    return StackStep(
        stack=stack,
        model=model,
        step_s=stack_s,
        baseline_step_s=baseline_s,
        tokens_per_step=tokens if isinstance(tokens := rows[stack].get("tokens_per_step"), int) else None,
        batch_size=batch,
        seq_len=seq,
        trustworthy=rows[stack].get("trustworthy") is True and rows[BASELINE].get("trustworthy") is True,
        within_tolerance=within,
        source=str(path),
    )
