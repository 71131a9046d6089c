"""The numerics price of a variant or stack: what it does to the training, not only to its speed.

Measured in the variant's own worker process after its timing (probes.step.worker): the adapter weights
are put back to their values at build (the same seed builds the same weights and LoRA in every
process), a fresh optimizer is made, and `steps` optimizer steps run on the step's one fixed batch
(memorising it, so the loss moves). Recorded through the optimizer's step hooks, whatever the step:
- the first step's loss and the adapter gradients it took (all adapters' gradients as one fp32 vector;
  the baseline's process saves its vector, every other process compares its own with it: cosine and
  norm ratio);
- the loss of every step (the curve);
- per step, the share of adapter elements with a non-zero gradient that the optimizer step left
  unchanged: updates rounded away (bf16 adapter weights lose updates below their resolution).

`compare(baseline, variant)` turns two processes' records into a NumericsRow and says whether it is
within TOLERANCE (the bounds are documented in docs/measurement.md).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from probes.step.measurement import Measurement

TOLERANCE = {
    "loss_first_diff_pct": 1.0,
    "grad_cosine_min": 0.99,
    "grad_norm_ratio_off": 0.05,
    "loss_curve_diff_pct": 10.0,
    "rounded_away_pct": 1.0,
}
"""Bounds (docs/measurement.md says why each): first-step loss within 1% of the baseline's; adapter
gradients at cosine >= 0.99 and norm within 5%; the loss curve never further from the baseline's than
10% of the baseline's own drop over the steps; at most 1% of updates rounded away at the last step."""
MIN_DROP = 1e-3
"""A baseline whose loss drops less than this (nats) over the steps prices the curve against its loss."""


class Observer:
    """Hooks on an optimizer recording first-step gradients and per-step rounded-away shares."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.first_grad: torch.Tensor | None = None
        self.rounded_away: list[float] = []
        self._before: list[torch.Tensor] = []
        self._handles = [optimizer.register_step_pre_hook(self._pre), optimizer.register_step_post_hook(self._post)]

    def _grads(self) -> list[torch.Tensor]:
        return [torch.zeros_like(p) if p.grad is None else p.grad.detach() for p in self.params]

    def _pre(self, *_args) -> None:
        if self.first_grad is None:
            self.first_grad = torch.cat([g.float().flatten() for g in self._grads()])
        self._before = [p.detach().clone() for p in self.params]

    def _post(self, *_args) -> None:
        moving = stuck = 0
        for p, before, grad in zip(self.params, self._before, self._grads()):
            nonzero = grad != 0
            moving += int(nonzero.sum())
            stuck += int((nonzero & (p.detach() == before)).sum())
        self.rounded_away.append(100.0 * stuck / moving if moving else 0.0)
        self._before = []

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def measure(step, steps: int, reference: Path | None, save: Path | None) -> dict:
    """Run `steps` steps of a fresh TrainStep, recording through its optimizer's hooks; compare the first
    gradient with the reference file's (when given) and save it (when asked)."""
    observer = Observer(step.optimizer)
    try:
        losses = [float(step()) for _ in range(steps)]
    finally:
        observer.remove()
    out = {"steps": steps, "losses": losses, "rounded_away_pct": observer.rounded_away}
    grad = observer.first_grad
    if grad is None:
        return {**out, "note": "the optimizer never stepped"}
    if save is not None:
        torch.save(grad.cpu(), save)
    if reference is not None and reference.is_file():
        base = torch.load(reference).to(grad.device)
        norms = float(base.norm()), float(grad.norm())
        out["grad_norm_ratio"] = norms[1] / norms[0] if norms[0] else math.nan
        out["grad_cosine"] = float(base @ grad) / (norms[0] * norms[1]) if norms[0] and norms[1] else 0.0
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class NumericsRow:
    model: str
    variant: str
    steps: int | None = None
    loss_first: float | None = None
    loss_first_diff_pct: float | None = None
    """|first loss - the baseline's| over the baseline's, percent."""
    grad_cosine: float | None = None
    """Cosine between this and the baseline's first-step adapter gradients."""
    grad_norm_ratio: float | None = None
    """Norm of this first-step adapter gradient over the baseline's."""
    loss_curve_diff_pct: float | None = None
    """max over steps |loss - the baseline's| in percent of the baseline's drop over the steps (of its
    first loss when it barely drops: `basis` says which)."""
    loss_last: float | None = None
    rounded_away_pct: float | None = None
    """Share of adapter elements with a gradient that the last optimizer step left unchanged."""
    rounded_away_max_pct: float | None = None
    within_tolerance: bool | None = None
    basis: str = ""


def compare(model: str, baseline: Measurement, result: Measurement) -> NumericsRow:
    """One row for a process's numerics against the baseline's (same seed, same batch)."""
    base, mine = baseline.numerics, result.numerics
    name = result.variant.name
    if not base or not mine or not base.get("losses") or not mine.get("losses"):
        why = result.status if result.status != "ok" else "no numerics recorded"
        return NumericsRow(model=model, variant=name, basis=f"not measured: {why}")
    b, v = base["losses"], mine["losses"]
    n = min(len(b), len(v))
    drop = b[0] - min(b[:n])
    scale, basis = (drop, "curve vs the baseline's drop") if drop >= MIN_DROP else (abs(b[0]), "curve vs its loss")
    row = NumericsRow(
        model=model,
        variant=name,
        steps=n,
        loss_first=v[0],
        loss_first_diff_pct=100 * abs(v[0] - b[0]) / abs(b[0]) if b[0] else None,
        grad_cosine=mine.get("grad_cosine", 1.0 if name == "baseline" else None),
        grad_norm_ratio=mine.get("grad_norm_ratio", 1.0 if name == "baseline" else None),
        loss_curve_diff_pct=100 * max(abs(x - y) for x, y in zip(b[:n], v[:n])) / scale if scale else None,
        loss_last=v[n - 1],
        rounded_away_pct=mine["rounded_away_pct"][-1] if mine["rounded_away_pct"] else None,
        rounded_away_max_pct=max(mine["rounded_away_pct"], default=None),
    )
    outside = breaches(row)
    return dataclasses.replace(
        row, within_tolerance=not outside, basis=basis + ("; outside: " + ", ".join(outside) if outside else "")
    )


def breaches(row: NumericsRow) -> list[str]:
    """The tolerances a row breaks (a figure not measured breaks its bound: unknown is not within)."""
    t, out = TOLERANCE, []
    checks = (
        ("first loss", row.loss_first_diff_pct, lambda x: x <= t["loss_first_diff_pct"]),
        ("gradient cosine", row.grad_cosine, lambda x: x >= t["grad_cosine_min"]),
        ("gradient norm", row.grad_norm_ratio, lambda x: abs(x - 1) <= t["grad_norm_ratio_off"]),
        ("loss curve", row.loss_curve_diff_pct, lambda x: x <= t["loss_curve_diff_pct"]),
        ("updates rounded away", row.rounded_away_pct, lambda x: x <= t["rounded_away_pct"]),
    )
    for label, value, ok in checks:
        if value is None or (isinstance(value, float) and math.isnan(value)) or not ok(value):
            out.append(label if value is None else f"{label} {value:.4g}")
    return out
