"""probes.step.steptime.fit: the fit against synthetic timings with known coefficients, the held-out error, and
fit_scaling over rows (launch-bound and failed points left out, terms' shares at the production length)."""

from __future__ import annotations

import numpy as np
import pytest

from probes.step.steptime import fit as profile_fit


def test_fit_recovers_known_coefficients():
    a, b, c, batch = 3e-9, 2e-5, 0.04, 2
    lens = [1024, 2048, 4096, 6144, 8192]
    times = [a * batch * n * n + b * batch * n + c for n in lens]
    coef = profile_fit.fit_terms(lens, times, batch)
    np.testing.assert_allclose(coef, [a, b, c], rtol=1e-6)
    assert max(profile_fit.heldout_errors(lens, times, batch)) < 1e-6


def test_three_points_are_interpolated_exactly_and_have_no_heldout_error():
    lens, times = [512, 1500, 4096], [0.31, 0.29, 0.95]  # not even monotone: still exact
    coef = profile_fit.fit_terms(lens, times, 1)
    for n, t in zip(lens, times):
        assert coef[0] * n * n + coef[1] * n + coef[2] == pytest.approx(t, rel=1e-9)
    assert profile_fit.heldout_errors(lens, times, 1) == [None, None, None]


def test_heldout_error_is_the_prediction_from_the_other_points():
    lens, times = [1, 2, 3, 4], [1.0, 4.0, 9.0, 17.0]  # t = L^2 except the last point
    errors = profile_fit.heldout_errors(lens, times, 1)
    # leaving out L=4: the other three give exactly L^2, predicting 16 against 17
    assert errors[3] == pytest.approx(1 / 17)


def test_fit_scaling_fits_the_gpu_bound_points_only():
    a, b, c, batch = 1e-3, 2e-2, 0.5, 2

    def true_s(n):
        return a * batch * n * n + b * batch * n + c

    def row(n, **kw):
        return profile_fit.ScalingRow(seq_len=n, batch_size=batch, tokens=batch * n, **kw)

    rows = [row(n, step_s=true_s(n), launch_bound=False) for n in (1, 2, 4, 5)]
    rows.insert(2, row(3, status="oom: CUDA out of memory"))
    rows.append(row(6, step_s=1.1 * true_s(6), launch_bound=True))  # the host set its time: left out
    out, fit, coef = profile_fit.fit_scaling(rows, batch_size=batch, seq_len=3)
    np.testing.assert_allclose(coef, [a, b, c], rtol=1e-6)
    got = {r.seq_len: r for r in out}
    assert [n for n in got if got[n].in_fit] == [1, 2, 4, 5]
    assert all(got[n].heldout_err_pct == pytest.approx(0, abs=1e-6) for n in (1, 2, 4, 5))
    assert got[3].fit_s == pytest.approx(true_s(3)) and got[3].heldout_err_pct is None
    assert got[6].heldout_err_pct == pytest.approx(100 * 0.1 / 1.1)  # |fit - measured| / measured
    parts = {"quadratic": a * batch * 9, "linear": b * batch * 3, "fixed": c}
    assert {f.term: f.share_at_production_pct for f in fit} == pytest.approx(
        {k: 100 * v / sum(parts.values()) for k, v in parts.items()}
    )
    assert profile_fit.fit_scaling(rows[:2] + rows[-1:], batch_size=batch, seq_len=3) == (
        rows[:2] + rows[-1:],
        [],
        None,
    )  # two GPU-bound points: no fit
