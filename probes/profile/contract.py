"""What another probe reads of a profile's result, typed: its step-time fit as a StepModel (goodput prices hours
with it, replay checks it) and the steps `profile --variant` measured as a MeasuredRun (a stack's factor).

A result is a `labprobe probe profile --json` output, or the store's newest ok profile in the same shape
(runner.analysis.stored_profile). The names of the tables and columns read here are the profile's own: this
module is the one place outside probes/profile/ that knows them (tests/probes/test_contracts.py checks that no
other probe module reads them, and that what probes.profile.probe writes reads back here). A replay's `--json`
output serves as a fit too: its `fit` and `scaling` tables are the same rows (probes.step.steptime.fit), its
`variant` the name of the step it fitted.
"""

from __future__ import annotations

import math
from pathlib import Path

from probes.result import InputError, read_json_file, table_rows
from probes.step.steptime.model import StepModel, card_of, setup_of
from probes.step.steptime.stack_step import MeasuredRun, MeasuredStep
from probes.step.train.checkpoint import model_name
from probes.step.variants.names import BASELINE

FIT = "fit"
"""A row per term (`term`: quadratic, linear, fixed; `coef`: seconds per row x token^2, row x token, step)."""
SCALING = "scaling"
"""A row per measured length (`seq_len`, `batch_size`, `tokens`, `step_s`; `in_fit`, `launch_bound`, `status`)."""
PADDING_PENALTY = "padding_penalty"
"""A row per case; the `half_padded` case's `penalty_same_shape_pct` is the mask's own cost."""
VARIANTS = "variants"
"""`profile --variant`: a row per variant at the production shape (`tokens` a step)."""
FIT_TABLES = (FIT, SCALING, PADDING_PENALTY)
"""The tables a step model is read from (the registry's stored input of goodput names these)."""
STACKS_FROM = "'variants' of profile --variant --json"


def _numbers(rows: list[dict], keys: tuple[str, ...], name: str, source: str) -> list[dict]:
    """`rows`, each of whose `keys` holds a finite number (a bool is none): a hand-edited or garbled file
    stops here in one line, not as NaN hours or a TypeError deep in the pricing."""
    for r in rows:
        for key in keys:
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{source}: table {name!r}: {key} is {value!r}, not a number")
    return rows


def _tables(result: object, source: str) -> dict:
    tables = result.get("tables", {}) if isinstance(result, dict) else None
    if not isinstance(tables, dict):
        raise InputError(f"{source}: not a profile result (a JSON object with 'tables')")
    return tables


def step_model(result: dict, source: str = "profile") -> StepModel:
    """The step model of a profile's result (its fit terms, fitted lengths, launch-bound points below them, the
    mask's penalty, the one-off of a new shape, and what it measured through)."""
    tables = _tables(result, source)
    fit = _numbers(table_rows(tables, FIT, source), ("coef",), FIT, source)
    coef = {r.get("term"): r.get("coef") for r in fit}
    if set(coef) != {"quadratic", "linear", "fixed"}:
        raise InputError(f"{source}: no fit (table {FIT!r} needs the quadratic, linear and fixed terms)")
    ok = [r for r in table_rows(tables, SCALING, source) if r.get("status", "ok") == "ok"]
    scaling = _numbers(ok, ("seq_len",), SCALING, source)
    fitted = _numbers([r for r in scaling if r.get("in_fit")], ("batch_size",), SCALING, source)
    if not fitted:
        raise InputError(f"{source}: no fitted point (table {SCALING!r} needs rows with in_fit true)")
    below = [r for r in scaling if r.get("launch_bound") and r["seq_len"] < min(f["seq_len"] for f in fitted)]
    launch = sorted((r["tokens"], r["step_s"]) for r in _numbers(below, ("tokens", "step_s"), SCALING, source))
    cases = table_rows(tables, PADDING_PENALTY, source)
    penalty = next((r.get("penalty_same_shape_pct") for r in cases if r.get("case") == "half_padded"), None)
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    checkpoint = config.get("checkpoint")
    if isinstance(checkpoint, list):  # carrier-like configs list their checkpoints; a profile has one
        checkpoint = checkpoint[0] if len(checkpoint) == 1 else None
    return StepModel(
        quadratic_s=coef["quadratic"],
        linear_s=coef["linear"],
        fixed_s=coef["fixed"],
        min_len=min(r["seq_len"] for r in fitted),
        max_len=max(r["seq_len"] for r in fitted),
        fit_batch_size=fitted[0]["batch_size"],
        launch_points=tuple(launch),
        mask_penalty_pct=max(0.0, penalty or 0.0),  # a mask adds work: a negative penalty is the noise's
        launch_bound_in_fit=None if any(r.get("launch_bound") is None for r in fitted) else False,
        new_shape_s=(result.get("summary") or {}).get("new_shape_s") or 0.0,
        source=source,
        model=model_name(checkpoint) if isinstance(checkpoint, str) and checkpoint else None,
        variant=measured_variant(config.get("variant"), source),
        setup=setup_of(config) | card_of(result),
    )


def read_step_model(path: Path) -> StepModel:
    """The step model of a `labprobe probe profile --json` file (an unreadable one is an InputError)."""
    return step_model(read_json_file(path, "profile JSON"), source=str(path))


def measured_variant(variant: object, source: str) -> str | None:
    """The variant or stack a fit was measured with, from its config `variant`; None for the baseline's. A
    profile's `variant` is a list: the variants it measured beside its fit, which is the baseline's; a replay's
    is the name of the step it fitted."""
    if variant in (None, BASELINE) or isinstance(variant, list):
        return None
    if not isinstance(variant, str):
        raise InputError(f"{source}: config.variant is {variant!r}, not a variant's name")
    return variant


def measured_run(result: dict, source: str) -> MeasuredRun | None:
    """The steps `profile --variant` measured, one model's (the config's checkpoint); None where the result has
    no `variants` rows."""
    tables = result.get("tables") if isinstance(result, dict) else None
    if not isinstance(tables, dict) or not tables.get(VARIANTS):
        return None
    rows = table_rows(tables, VARIANTS, source)
    config = result.get("config") if isinstance(result.get("config"), dict) else {}
    checkpoint = config.get("checkpoint") or "profile"
    checkpoint = checkpoint[0] if isinstance(checkpoint, list) and checkpoint else checkpoint
    if not isinstance(checkpoint, str):
        raise InputError(f"{source}: config.checkpoint is {checkpoint!r}, not a checkpoint's path")
    model = model_name(checkpoint)
    steps = tuple(
        MeasuredStep(
            model=model,
            variant=str(r.get("variant")),
            status=str(r.get("status", "ok")),
            step_s=r.get("step_s"),
            tokens_per_step=r.get("tokens"),
            trustworthy=r.get("trustworthy"),
            launch_bound=r.get("launch_bound"),
        )
        for r in rows
    )
    batch, seq = (v if type(v) is int else None for v in (config.get("batch_size"), config.get("seq_len")))
    fill = config.get("rows", "full")
    return MeasuredRun(steps=steps, batch_size=batch, seq_len=seq, rows=fill, setup=setup_of(config) | card_of(result),
                       source=source)  # fmt: skip
