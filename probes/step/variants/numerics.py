"""The numerics price of a variant or stack: what it does to the training, not only to its speed.

Measured in the variant's own worker process after its timing (probes.step.variants.worker), in two parts, each
from the adapter weights at build (the same seed builds the same weights and LoRA in every process) with
a fresh optimizer, on the step's one fixed batch:
- the gradient probe, one step from those weights with every LoRA B drawn from N(0, PROBE_B_STD^2)
  (the same values in every process). At build B is zero, so A's gradients are exactly zero and the LoRA
  path adds nothing to the loss: a first step from there would compare B's gradients alone and miss any
  change to the adapters' forward. The probe's loss is `loss_first`; its adapter gradients, keyed by
  parameter name (so processes whose optimizers order their groups differently compare element for
  element), are saved by the baseline's process and compared by every other: cosine and norm ratio;
- the curve: `steps` optimizer steps from the weights at build (B zero, as a run starts; memorising the
  batch, so the loss moves), recording through the optimizer's step hooks, whatever the step, the loss of
  every step and the share of adapter elements with a non-zero gradient that the step left unchanged:
  updates rounded away (bf16 adapter weights lose updates below their resolution).

`compare(baseline, variant)` turns two processes' records into a NumericsRow and says whether it is
within TOLERANCE (the bounds are documented in docs/measurement.md).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch

from probes.step.variants.measurement import Measurement

TOLERANCE = {
    "loss_first_diff_pct": 1.0,
    "grad_cosine_min": 0.99,
    "grad_norm_ratio_off": 0.05,
    "loss_curve_diff_pct": 10.0,
    "rounded_away_pct": 1.0,
}
"""Bounds (docs/measurement.md says why each): the probe's loss within 1% of the baseline's; adapter
gradients at cosine >= 0.99 and norm within 5%; the loss curve never further from the baseline's than
10% of the baseline's own drop over the steps; at most 1% of updates rounded away at the last step."""
MIN_DROP = 1e-3
"""A baseline whose loss drops less than this (nats) over the steps prices the curve against its loss."""
PROBE_B_STD = 0.01
"""Spread of the LoRA B weights the gradient probe starts from: adapters that have trained a while."""


def adapter_name(name: str) -> str:
    """A parameter's name as every process spells it (a compiled wrapper's `_orig_mod.` dropped)."""
    return name.replace("_orig_mod.", "")


def perturb_lora_b(model: torch.nn.Module, seed: int) -> None:
    """Every trainable LoRA B drawn from N(0, PROBE_B_STD^2), in name order from one seeded generator:
    the same values in every process."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(((adapter_name(n), p) for n, p in model.named_parameters()), key=lambda x: x[0]):
            if p.requires_grad and ".lora_B." in name:
                p.copy_(torch.randn(p.shape, generator=generator) * PROBE_B_STD)


def probe_gradients(step, model: torch.nn.Module) -> tuple[float, dict[str, torch.Tensor]]:
    """One step of `step`: its loss and the adapter gradients it took (by name, fp32, flattened, on the
    CPU; a parameter the optimizer holds without a gradient counts as zeros)."""
    names = {id(p): adapter_name(n) for n, p in model.named_parameters()}
    grads: dict[str, torch.Tensor] = {}

    def grab(optimizer, *_args) -> None:
        if grads:
            return
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = torch.zeros(p.numel()) if p.grad is None else p.grad.detach().float().flatten().cpu()
                grads[names.get(id(p), f"unnamed {len(grads)}")] = g

    handle = step.optimizer.register_step_pre_hook(grab)
    try:
        loss = float(step())
    finally:
        handle.remove()
    return loss, grads


def agreement(base: dict[str, torch.Tensor], mine: dict[str, torch.Tensor]) -> dict:
    """Two processes' adapter gradients, name by name: the norm ratio over all of them, and the lowest cosine
    of any one tensor (`grad_worst` names it). A and B gradients differ in size by orders of magnitude, so a
    cosine over everything would hide a broken A, or one layer among many. A note instead when the two are
    not the same parameters."""
    if base.keys() != mine.keys() or any(base[k].numel() != mine[k].numel() for k in base):
        differ = len(base.keys() ^ mine.keys()) or sum(base[k].numel() != mine[k].numel() for k in base)
        return {"grad_note": f"not comparable: {differ} adapter parameters differ from the baseline's"}
    cosines, squares = {}, [0.0, 0.0]
    for name in sorted(base):
        b, m = base[name].double(), mine[name].double()
        nb, nm = float(b.norm()), float(m.norm())
        squares[0], squares[1] = squares[0] + nb * nb, squares[1] + nm * nm
        if nb or nm:  # both zero: nothing to compare
            cosines[name] = float(b @ m) / (nb * nm) if nb and nm else 0.0
    worst = min(cosines, key=cosines.get) if cosines else None
    return {
        "grad_norm_ratio": math.sqrt(squares[1] / squares[0]) if squares[0] else math.nan,
        "grad_cosine": cosines[worst] if worst else math.nan,
        "grad_worst": worst or "",
    }


class Observer:
    """Hooks on an optimizer recording, per step, the share of adapter updates rounded away."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.rounded_away: list[float] = []
        self._before: list[torch.Tensor] = []
        self._handles = [optimizer.register_step_pre_hook(self._pre), optimizer.register_step_post_hook(self._post)]

    def _grads(self) -> list[torch.Tensor]:
        return [torch.zeros_like(p) if p.grad is None else p.grad.detach() for p in self.params]

    def _pre(self, *_args) -> None:
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


def curve(step, steps: int) -> dict:
    """`steps` steps of a fresh TrainStep: the loss of each and the share of its updates rounded away."""
    observer = Observer(step.optimizer)
    try:
        losses = [float(step()) for _ in range(steps)]
    finally:
        observer.remove()
    out = {"steps": steps, "losses": losses, "rounded_away_pct": observer.rounded_away}
    return out if observer.rounded_away else {**out, "note": "the optimizer never stepped"}


def probe(loss: float, grads: dict[str, torch.Tensor], reference: Path | None, save: Path | None) -> dict:
    """The gradient probe's record: its loss, and its gradients saved (the baseline's process) or compared
    with the saved ones (every other process)."""
    out = {"probe_loss": loss}
    if not grads:
        return {**out, "grad_note": "the optimizer never stepped"}
    if save is not None:
        torch.save(grads, save)
    if reference is not None and reference.is_file():
        out.update(agreement(torch.load(reference), grads))
    return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class NumericsRow:
    model: str
    variant: str
    steps: int | None = None
    loss_first: float | None = None
    """The gradient probe's loss (one step from the adapters at build with every LoRA B non-zero)."""
    loss_first_diff_pct: float | None = None
    """|loss_first - the baseline's| over the baseline's, percent."""
    grad_cosine: float | None = None
    """The lowest cosine between this and the baseline's gradient of one adapter tensor, in the gradient probe."""
    grad_worst: str = ""
    """The adapter tensor of that lowest cosine, from its layer on (`layers.0.mlp.down_proj.lora_A`)."""
    grad_norm_ratio: float | None = None
    """Norm of this probe's adapter gradients over the baseline's."""
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
        late = (result.not_measured or {}).get("numerics")
        if late is None and (base_late := (baseline.not_measured or {}).get("numerics")) is not None:
            late = f"the baseline's: {base_late}"
        if late is None and baseline.status != "ok":
            late = "the baseline did not measure, nothing to compare with"
        why = result.status if result.status != "ok" else late or "no numerics recorded"
        return NumericsRow(model=model, variant=name, basis=f"not measured: {why}")
    b, v = base["losses"], mine["losses"]
    first_b, first_v = base.get("probe_loss", b[0]), mine.get("probe_loss", v[0])
    n = min(len(b), len(v))
    drop = b[0] - min(b[:n])
    scale, basis = (drop, "curve vs the baseline's drop") if drop >= MIN_DROP else (abs(b[0]), "curve vs its loss")
    if mine.get("grad_note"):
        basis += f"; gradients {mine['grad_note']}"
    row = NumericsRow(
        model=model,
        variant=name,
        steps=n,
        loss_first=first_v,
        loss_first_diff_pct=100 * abs(first_v - first_b) / abs(first_b) if first_b else None,
        grad_cosine=mine.get("grad_cosine", 1.0 if name == "baseline" else None),
        grad_norm_ratio=mine.get("grad_norm_ratio", 1.0 if name == "baseline" else None),
        grad_worst=_short(mine.get("grad_worst", "")),
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
            where = f" ({row.grad_worst})" if label == "gradient cosine" and row.grad_worst else ""
            out.append(label if value is None else f"{label} {value:.4g}{where}")
    return out


def _short(name: str) -> str:
    """An adapter tensor's name from its layer on: `layers.0.self_attn.q_proj.lora_A`."""
    name = name.removesuffix(".weight").replace(".default", "")
    return name[name.find("layers.") :] if "layers." in name else name
