"""The `replay` probe's step model (probes.step.steptime.model, the one goodput prices with), read from a
profile's JSON or fitted here on padded batches of the replay's own session (probes.replay.probe
documents both)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from probes.profile import contract as profile_results
from probes.result import Check
from probes.step import session as session_mod
from probes.step.session import Session, oom_guard
from probes.step.steptime.fit import ScalingRow, fit_scaling
from probes.step.steptime.model import StepModel


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


def new_shape_excess_s(raw: dict[str, dict], first: str) -> dict[str, float]:
    """Each fit point's first warm-up step less its timed mean, by fit key (`fit/WIDTH`). The first point
    timed in the process is left out: it also pays the process's own first-step costs."""
    return {
        key: t["raw_s"][0] - float(np.mean(t["raw_s"][t["num_warmup_configured"] :]))
        for key, t in raw.items()
        if key.startswith("fit/") and key != first and t["num_warmup_configured"]
    }


def new_shape_s(raw: dict[str, dict], first: str) -> float:
    """The one-off cost of a batch shape's first step: the MEDIAN of the fit points' excesses
    (new_shape_excess_s). A replay sums one-offs, so a mean would be its estimator, but over seven or so
    fit points one outlier rules a mean: on an H100 (4B, 3 x 2,048) the mean came to 1.25 s where the
    replay's own 132 new-shape steps cost 0.15-0.16 s more than their steady prediction. That run kept no
    per-point excess, so an outlier is the likelier cause, not a proven one (each fit point follows an
    emptied allocator cache; a replayed shape mostly does not): the summary now keeps every point's, and
    replay's new_shape_s_confirmed compares the one-off with the replayed one."""
    extra = list(new_shape_excess_s(raw, first).values())
    return max(0.0, float(np.median(extra))) if extra else 0.0


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
    return None if profile is None else profile_results.read_step_model(profile)


NEW_SHAPE_MIN_STEPS = 5
NEW_SHAPE_SLACK_S = 0.02
"""Below this the one-off's disagreement is noise (a CPU's tiny steps, a GPU's jitter)."""


def new_shape_replayed(steps: list, compiled: set[tuple[str, int]], priced_s: float) -> tuple[dict, Check]:
    """The one-off measured a second way: over the replay's steps at a new shape (those where dynamo compiled
    a graph left out), the mean of measured less the steady prediction, less the steady prediction's own miss
    on the same strategy's other steps (a steady model 10% off is no one-off). `steps`: the replay's StepRows;
    `compiled`: (strategy, step) pairs that compiled. Its check fails where the priced one-off is off by more
    than half and NEW_SHAPE_SLACK_S: hours priced with it count each new shape wrong (goodput --new-shape-s
    takes the replayed value)."""
    counted = [s for s in steps if (s.strategy, s.step) not in compiled]
    miss = _steady_miss(counted)
    excess = [s.measured_s - (s.predicted_s - priced_s) - miss[s.strategy] for s in counted if s.new_shape]
    replayed = float(np.mean(excess)) if excess else None
    summary = {"new_shape_replayed_s": replayed, "new_shape_replayed_steps": len(excess)}
    if len(excess) < NEW_SHAPE_MIN_STEPS:
        detail, ok = f"{len(excess)} new-shape steps replayed (fewer than {NEW_SHAPE_MIN_STEPS}): not compared", True
    else:
        ok = abs(replayed - priced_s) <= max(NEW_SHAPE_SLACK_S, 0.5 * priced_s)
        detail = (
            f"the replay's {len(excess)} new-shape steps cost {replayed:.3f} s each over their steady prediction "
            f"(its miss on the other steps taken out), the model charged {priced_s:.3f} s"
            + ("" if ok else f": price with goodput --new-shape-s {max(0.0, replayed):.3f}")
        )
    return summary, Check(name="new_shape_s_confirmed", ok=ok, detail=detail)


def _steady_miss(steps: list) -> dict[str, float]:
    """Each strategy's mean of measured less predicted over its steps at shapes already seen; a strategy of
    new shapes only takes the others' mean (0 where no strategy has such a step)."""
    miss = {}
    for strategy in {s.strategy for s in steps}:
        seen = [s.measured_s - s.predicted_s for s in steps if s.strategy == strategy and not s.new_shape]
        miss[strategy] = float(np.mean(seen)) if seen else None
    known = [m for m in miss.values() if m is not None]
    fallback = float(np.mean(known)) if known else 0.0
    return {strategy: fallback if m is None else m for strategy, m in miss.items()}
