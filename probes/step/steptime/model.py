"""A host x checkpoint's step time as a function of the batch shape (rows, padded width), read from a profile's
result (probes.profile.contract) or fitted by `replay`: `goodput` prices an epoch's batches with it, `replay`
checks it against the same batches run through the harness. The `goodput` probe documents the model (the
polynomial, launch-bound points below the fit, the mask penalty).
"""

from __future__ import annotations

import dataclasses

import numpy as np

SETUP_KEYS = ("harness", "lora_rank", "ce_chunk", "card")
"""What a step's time depends on beside the model, the shape and the variant: a stack's saving measured
through another harness, LoRA rank or loss chunk, or on another card (the result's summary `device`), is
another step's saving (the weights' values and LoRA's alpha change no time)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class StepModel:
    """A host x checkpoint's step time as a function of the batch shape."""

    quadratic_s: float
    """Seconds per row x token^2 of the padded width (attention's share)."""
    linear_s: float
    """Seconds per row x token."""
    fixed_s: float
    """Seconds a step."""
    min_len: int
    max_len: int
    """The fitted lengths, tokens: outside them the polynomial is stretched."""
    fit_batch_size: int = 1
    """Rows of a fitted step."""
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
    variant: str | None = None
    """The variant or stack the fit was measured with; None: the baseline's (a stack's factor scales only that)."""
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
