"""The scaling fit of step time against sequence length: `profile` measures its points (and `replay` its
own, on padded batches), this fits them.

step_s = a*batch*L^2 + b*batch*L + c by least squares over the GPU-bound points (>= 3): per point the
fitted value and the error of predicting it from a fit of the other points (`heldout_err_pct`), and
per term its share of the fitted step at the production length. Pure numpy, no model, no torch.
"""

from __future__ import annotations

import dataclasses

import numpy as np

TERMS = ("quadratic", "linear", "fixed")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ScalingRow:
    seq_len: int
    batch_size: int
    tokens: int
    params_total: int | None = None
    params_active: int | None = None
    """Parameters one token uses (experts at top_k / num_experts; probes.step.train.params)."""
    step_s: float | None = None
    spread_pct: float | None = None
    spread_all_pct: float | None = None
    """Over every timed step after warm-up (spread_pct is over the quiet window; probes.step.measure.timing)."""
    iqr_pct: float | None = None
    steps: int | None = None
    peak_mem_bytes: int | None = None
    gpu_busy_frac: float | None = None
    launch_bound: bool | None = None
    in_fit: bool = False
    fit_s: float | None = None
    heldout_err_pct: float | None = None
    """|predicted from the other fitted points - measured| / measured; None with < 4 fitted points."""
    status: str = "ok"


@dataclasses.dataclass(frozen=True, kw_only=True)
class FitRow:
    term: str
    coef: float
    unit: str
    share_at_production_pct: float


def design(seq_lens, batch_size: int) -> np.ndarray:
    """Columns of the fit: batch*L^2 (attention), batch*L (per token), 1 (per batch)."""
    lengths = np.asarray(seq_lens, dtype=float)
    return np.stack([batch_size * lengths**2, batch_size * lengths, np.ones_like(lengths)], axis=1)


def predict(coef: np.ndarray, seq_len: int, batch_size: int) -> float:
    """The fitted step time at one length."""
    return float((design([seq_len], batch_size) @ coef)[0])


def fit_terms(seq_lens, step_s, batch_size: int) -> np.ndarray:
    """Least-squares (a, b, c); three points are interpolated exactly."""
    coef, *_ = np.linalg.lstsq(design(seq_lens, batch_size), np.asarray(step_s, float), rcond=None)
    return coef


def heldout_errors(seq_lens, step_s, batch_size: int) -> list[float | None]:
    """Per point: |prediction from a fit of the others - measured| / measured (None if < 3 left)."""
    if len(seq_lens) < 4:
        return [None] * len(seq_lens)
    out = []
    for i in range(len(seq_lens)):
        rest = [j for j in range(len(seq_lens)) if j != i]
        coef = fit_terms([seq_lens[j] for j in rest], [step_s[j] for j in rest], batch_size)
        predicted = predict(coef, seq_lens[i], batch_size)
        out.append(abs(predicted - step_s[i]) / step_s[i])
    return out


def fit_scaling(
    rows: list[ScalingRow], *, batch_size: int, seq_len: int
) -> tuple[list[ScalingRow], list[FitRow], np.ndarray | None]:
    """Fit the GPU-bound points; every row gets its fitted value and held-out error, every term its
    share at `seq_len` (the production length). Fewer than 3 GPU-bound points: no fit (coef None)."""
    fitted = [r for r in rows if r.status == "ok" and not r.launch_bound]
    if len(fitted) < 3:
        return rows, [], None
    b = batch_size
    lens, times = [r.seq_len for r in fitted], [r.step_s for r in fitted]
    coef = fit_terms(lens, times, b)
    errors = dict(zip(lens, heldout_errors(lens, times, b)))
    out = []
    for r in rows:
        fit_s = predict(coef, r.seq_len, b)
        err = errors.get(r.seq_len)
        if r.seq_len not in errors and r.step_s:  # left out of the fit: its error is held out already
            err = abs(fit_s - r.step_s) / r.step_s
        out.append(
            dataclasses.replace(
                r, in_fit=r.seq_len in errors, fit_s=fit_s, heldout_err_pct=None if err is None else 100 * err
            )
        )
    parts = design([seq_len], b)[0] * coef
    total = parts.sum()
    units = ("s per batch*token^2", "s per token", "s per batch")
    fit = [
        FitRow(term=term, coef=float(c), unit=u, share_at_production_pct=float(100 * p / total))
        for term, c, u, p in zip(TERMS, coef, units, parts)
    ]
    return out, fit, coef
