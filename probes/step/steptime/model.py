"""A host x checkpoint's step time as a function of the batch shape (rows, padded width), read from a
`labprobe probe profile --json` result or fitted by `replay`: `goodput` prices an epoch's batches with
it, `replay` checks it against the same batches run through the harness. The `goodput` probe
documents the model (the polynomial, launch-bound points below the fit, the mask penalty).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from probes.result import InputError, read_json_file
from probes.step.train.checkpoint import model_name

SETUP_KEYS = ("harness", "lora_rank", "ce_chunk", "card")
"""What a step's time depends on beside the model, the shape and the variant: a stack's saving measured
through another harness, LoRA rank or loss chunk, or on another card (the result's summary `device`), is
another step's saving (the weights' values and LoRA's alpha change no time)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepModel:
    """A host x checkpoint's step time as a function of the batch shape."""

    quadratic_s: float
    linear_s: float
    fixed_s: float
    min_len: int
    max_len: int
    fit_batch_size: int = 1
    launch_points: tuple[tuple[int, float], ...] = ()
    """(tokens a step, step_s) of measured launch-bound points below the fit."""
    mask_penalty_pct: float = 0.0
    """Extra time of a masked batch over a maskless one of the same shape (0 when the fit is masked)."""
    launch_bound_in_fit: bool | None = False
    """True: the fit includes launch-bound points; None: not known (a CPU profile)."""
    new_shape_s: float = 0.0
    """One-off cost of the first step at a batch shape (rows, width) the process has not run before
    (kernel plans, allocator growth), paid once per shape per job (measured by `replay`)."""
    source: str = "given"
    model: str | None = None
    """The model the fit measured (its checkpoint folder's name), when the profile's config names it."""
    variant: object = None
    """The profile's config `variant` as it gives it (a name, a list, None), read once with the fit:
    probes.step.steptime.stack_step.profile_variant says whether the fit was a stack's."""
    setup: dict = dataclasses.field(default_factory=dict)
    """The harness, LoRA rank and CE chunk the fit measured through, those the profile's config names
    (SETUP_KEYS)."""

    def poly(self, rows, widths) -> np.ndarray:
        rows, widths = np.asarray(rows, float), np.asarray(widths, float)
        return self.quadratic_s * rows * widths**2 + self.linear_s * rows * widths + self.fixed_s

    def predict(self, rows, widths, masked) -> np.ndarray:
        """Predicted step_s of each batch."""
        rows, widths = np.asarray(rows, float), np.asarray(widths, float)
        out = self.poly(rows, widths)
        if self.launch_points:
            edge = self.fit_batch_size * self.min_len
            xs = [t for t, _ in self.launch_points] + [edge]
            ys = [s for _, s in self.launch_points] + [float(self.poly(self.fit_batch_size, self.min_len))]
            tokens = rows * widths
            below = tokens < edge
            out = np.where(below, np.maximum(out, np.interp(tokens, xs, ys)), out)
        return out * np.where(np.asarray(masked, bool), 1 + self.mask_penalty_pct / 100, 1.0)

    def outside(self, rows, widths) -> np.ndarray:
        """Batches priced outside the fitted lengths and not by the measured launch-bound points: those price
        only batches of fewer tokens than the fit's first point (predict); a batch of more tokens at a width
        below the fit is the polynomial stretched, however many launch points there are."""
        rows, widths = np.asarray(rows), np.asarray(widths)
        below_edge = rows * widths < self.fit_batch_size * self.min_len
        covered = below_edge if self.launch_points else np.zeros(widths.shape, bool)
        return ~covered & ((widths < self.min_len) | (widths > self.max_len))

    def scaled(self, factor: float, source: str) -> StepModel:
        """Every step time `factor` times as long (a stack's measured step over the baseline's): the fit's
        terms and the launch-bound points. The mask penalty is relative and stays; so does new_shape_s, a
        one-off of the process, not of the step (a compiled stack's recompiles are replay's to measure)."""
        return dataclasses.replace(
            self,
            quadratic_s=self.quadratic_s * factor,
            linear_s=self.linear_s * factor,
            fixed_s=self.fixed_s * factor,
            launch_points=tuple((tokens, s * factor) for tokens, s in self.launch_points),
            source=source,
        )


def _table(tables: dict, name: str, source: str) -> list[dict]:
    rows = tables.get(name, [])
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{source}: table {name!r} is not a list of rows")
    return rows


def _numbers(rows: list[dict], keys: tuple[str, ...], name: str, source: str) -> list[dict]:
    """`rows`, each of whose `keys` holds a finite number (a bool is none): a hand-edited or garbled file
    stops here in one line, not as NaN hours or a TypeError deep in the pricing."""
    for r in rows:
        for key in keys:
            value = r.get(key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"{source}: table {name!r}: {key} is {value!r}, not a number")
    return rows


def model_from_profile(profile: dict, source: str = "profile") -> StepModel:
    """The step model of a `labprobe probe profile --json` result (or the same tables from the store)."""
    tables = profile.get("tables", {}) if isinstance(profile, dict) else None
    if not isinstance(tables, dict):
        raise InputError(f"{source}: not a profile result (a JSON object with 'tables')")
    coef = {r.get("term"): r.get("coef") for r in _numbers(_table(tables, "fit", source), ("coef",), "fit", source)}
    if set(coef) != {"quadratic", "linear", "fixed"}:
        raise InputError(f"{source}: no fit (table 'fit' needs the quadratic, linear and fixed terms)")
    ok = [r for r in _table(tables, "scaling", source) if r.get("status", "ok") == "ok"]
    scaling = _numbers(ok, ("seq_len",), "scaling", source)
    fitted = _numbers([r for r in scaling if r.get("in_fit")], ("batch_size",), "scaling", source)
    if not fitted:
        raise InputError(f"{source}: no fitted point (table 'scaling' needs rows with in_fit true)")
    below = [r for r in scaling if r.get("launch_bound") and r["seq_len"] < min(f["seq_len"] for f in fitted)]
    launch = sorted((r["tokens"], r["step_s"]) for r in _numbers(below, ("tokens", "step_s"), "scaling", source))
    penalty = next(
        (
            r.get("penalty_same_shape_pct")
            for r in _table(tables, "padding_penalty", source)
            if r.get("case") == "half_padded"
        ),
        None,
    )
    unknown = any(r.get("launch_bound") is None for r in fitted)
    new_shape_s = (profile.get("summary") or {}).get("new_shape_s") or 0.0
    config = profile.get("config") if isinstance(profile.get("config"), dict) else {}
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
        launch_bound_in_fit=None if unknown else False,
        new_shape_s=new_shape_s,
        source=source,
        model=model_name(checkpoint) if isinstance(checkpoint, str) and checkpoint else None,
        variant=config.get("variant"),
        setup=setup_of(config) | card_of(profile),
    )


def from_profile_file(path: Path) -> StepModel:
    """The step model of a `labprobe probe profile --json` file (an unreadable one is an InputError)."""
    profile = read_json_file(path, "profile JSON")
    return model_from_profile(profile, source=str(path))


HARNESS_ALIASES = {"probes.harness": "probes.step.harness"}
"""Older files name the reference harness where it lived before probes/ became packages: the same harness."""


def setup_of(config: object) -> dict:
    """The SETUP_KEYS a run's config names: a JSON object's keys, or a StepConfig's fields."""
    get = config.get if isinstance(config, dict) else lambda key: getattr(config, key, None)
    setup = {key: get(key) for key in SETUP_KEYS if get(key) is not None}
    if isinstance(setup.get("harness"), str):
        setup["harness"] = HARNESS_ALIASES.get(setup["harness"], setup["harness"])
    return setup


def card_of(result: dict) -> dict:
    """{"card": the GPU's name} from a result's summary `device` (carrier, profile, replay write it), {} where
    it names none."""
    summary = result.get("summary") if isinstance(result, dict) else None
    device = summary.get("device") if isinstance(summary, dict) else None
    return {"card": device} if isinstance(device, str) and device else {}
