"""The spread trust rule that runner/analysis/drift.py owns: which columns are spreads, their units, the 2% limit;
and that compare, the report and drift, which all read spreads through it, mark the same rows."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from runner.analysis import compare, report_html
from runner.analysis.drift import (
    SPREAD_LIMIT_PCT,
    above_spread_limit,
    drift_table,
    is_spread_column,
    spread_fraction,
    spread_pct,
)


def test_spread_columns_are_named_so():
    assert [
        c
        for c in ("spread_pct", "step_s_spread_pct", "spread", "step_s", "iqr_pct", "tok_per_s")
        if is_spread_column(c)
    ] == ["spread_pct", "step_s_spread_pct", "spread"]


def test_pct_columns_are_percent_and_others_fractions():
    # 0.5% is 0.005 as a fraction, 3.25% is 0.0325.
    assert spread_pct(pd.Series([0.5, 3.25]), "spread_pct").tolist() == [0.5, 3.25]
    assert spread_pct(pd.Series([0.005, 0.0325]), "spread").tolist() == pytest.approx([0.5, 3.25], rel=1e-12)
    assert spread_fraction(pd.Series([0.5, 3.25]), "step_s_spread_pct").tolist() == pytest.approx(
        [0.005, 0.0325], rel=1e-12
    )
    assert spread_fraction(pd.Series([0.005, 0.0325]), "spread").tolist() == [0.005, 0.0325]


def test_above_two_percent_is_untrusted_and_two_itself_is_not():
    assert SPREAD_LIMIT_PCT == 2.0
    pct = pd.Series([0.0, 1.99, 2.0, 2.01, 40.0, math.nan])
    assert above_spread_limit(pct).tolist() == [False, False, False, True, True, False]
    assert above_spread_limit(pct, 5.0).tolist() == [False, False, False, False, True, False]


@pytest.mark.parametrize("column, values", [("spread_pct", [1.5, 2.0, 2.5]), ("spread", [0.015, 0.02, 0.025])])
def test_compare_report_and_drift_mark_the_same_rows(column, values):
    expected = [False, False, True]  # 1.5%, 2% (at the limit), 2.5%
    hosts = [f"h{i}" for i in range(len(values))]
    rows = pd.DataFrame(
        {
            "run_id": "r1",
            "probe": "carrier",
            "host": hosts,
            "checkpoint": "A",
            "finished_at": pd.Timestamp("2026-12-03"),
            "step_s": 1.0,
            column: values,
        }
    )
    assert compare._cells(rows, "step_s", [])["untrusted"].tolist() == expected
    assert report_html._untrusted(rows).tolist() == expected
    assert (~drift_table(rows, "step_s", by=[])["trusted"]).tolist() == expected
