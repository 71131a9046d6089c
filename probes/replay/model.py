"""The `replay` probe's step model (probes.step.steptime, the one goodput prices with), read from a
profile's JSON or fitted here on padded batches of the replay's own session (probes.replay.probe
documents both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probes.step import session as session_mod
from probes.step import steptime
from probes.step.fit import ScalingRow, fit_scaling
from probes.step.session import Session, oom_guard
from probes.step.steptime import StepModel


def _padded_rows(batch_size: int, width: int) -> list[int] | None:
    """A fit point's rows: all full but the last, half padding (so the explicit mask is the replay's)."""
    return None if batch_size == 1 else [width] * (batch_size - 1) + [max(1, width // 2)]


def fit_point(session: Session, width: int) -> ScalingRow:
    b = session.config.batch_size
    base = dict(seq_len=width, batch_size=b, tokens=b * width)

    def time_it() -> ScalingRow:
        t, peak = session.time(f"fit/{width}", session.step(b, width, real_lengths=_padded_rows(b, width)))
        timed = t.raw_s[t.num_warmup_configured or 0 :]
        return ScalingRow(
            **base,
            step_s=float(np.mean(timed)),
            spread_pct=100 * t.spread,
            spread_all_pct=100 * t.spread_all,
            iqr_pct=100 * t.iqr,
            steps=len(timed),
            peak_mem_bytes=peak,
        )

    return oom_guard(session, time_it, lambda msg: ScalingRow(**base, status=msg))


def with_busy(session: Session, row: ScalingRow) -> ScalingRow:
    """gpu_busy_frac of a fit point, profiled on the padded rows it was timed with."""
    return session_mod.with_busy(session, row, real_lengths=_padded_rows(row.batch_size, row.seq_len))


def new_shape_s(raw: dict[str, dict], first: str) -> float:
    """The one-off cost of a batch shape's first step: over the fit points, the mean of (first
    warm-up step - mean timed step), the mean since a replay sums them. The first point timed in the
    process is left out: it also pays the process's own first-step costs."""
    extra = [
        t["raw_s"][0] - float(np.mean(t["raw_s"][t["num_warmup_configured"] :]))
        for key, t in raw.items()
        if key.startswith("fit/") and key != first and t["num_warmup_configured"]
    ]
    return max(0.0, float(np.mean(extra))) if extra else 0.0


def model_here(session: Session, rows: list[ScalingRow]):
    """(scaling rows, fit rows, StepModel or None) from the fit points measured in this session."""
    b = session.config.batch_size
    scaling, fit, coef = fit_scaling(rows, batch_size=b, seq_len=max(r.seq_len for r in rows))
    if coef is None:
        return scaling, fit, None
    fitted = [r.seq_len for r in scaling if r.in_fit]
    launch = tuple((r.tokens, r.step_s) for r in scaling if r.launch_bound and r.seq_len < min(fitted))
    return (
        scaling,
        fit,
        StepModel(
            quadratic_s=float(coef[0]),
            linear_s=float(coef[1]),
            fixed_s=float(coef[2]),
            min_len=min(fitted),
            max_len=max(fitted),
            fit_batch_size=b,
            launch_points=launch,
            launch_bound_in_fit=None if session.device.type != "cuda" else False,
            new_shape_s=new_shape_s(session.raw, f"fit/{max(r.seq_len for r in rows)}"),
            source="measured in this session",
        ),
    )


def given_model(profile: Path | None) -> StepModel | None:
    """The step model of a `labprobe probe profile --json` file; None without one."""
    return None if profile is None else steptime.from_profile_file(profile)
