"""The report's carrier bars: MFU against the datasheet peak, and against the measured peak as soon as
one host's card has no datasheet figure (a card not in probes/step/measure/peaks.py), so its MFU is never blank."""

from __future__ import annotations

import pandas as pd

from probes.carrier.present import MEASURED_MFU
from probes.carrier.present import bar_metrics as carrier_metrics


def rows(sheet: list) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host": ["gx10", "ana-ml2"][: len(sheet)],
            "tok_per_s": [9000.0, 12000.0][: len(sheet)],
            "mfu_vs_measured_peak": [0.31, 0.42][: len(sheet)],
            "mfu_vs_datasheet_peak": sheet,
        }
    )


def test_every_card_listed_draws_the_datasheet_mfu_only():
    drawn = [c for c, _, _ in carrier_metrics(rows([0.25, 0.34]))]
    assert drawn == ["tok_per_s", "mfu_vs_datasheet_peak"]


def test_a_card_without_datasheet_figure_adds_the_measured_peak_mfu():
    drawn = [c for c, _, _ in carrier_metrics(rows([None, 0.34]))]
    assert drawn == ["tok_per_s", "mfu_vs_datasheet_peak", MEASURED_MFU[0]]
    drawn = [c for c, _, _ in carrier_metrics(rows([None]))]
    assert drawn == ["tok_per_s", MEASURED_MFU[0]]  # no datasheet MFU at all: the measured one, not nothing
