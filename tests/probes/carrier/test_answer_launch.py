"""The carrier's answer says when a row is launch-bound, what that means and what to measure next: the
hybrid Qwen3.5-0.8B with its fast kernels was busy 46% of its step on an H100 (benchmarks/RESULTS.md)."""

from __future__ import annotations

import pandas as pd

from probes.carrier import answer


def _carriers(**changes) -> pd.DataFrame:
    rows = [
        {"model": "qwen3-4b-base", "variant": "baseline", "tok_per_s": 10976.0, "step_s": 0.3732,
         "spread_pct": 0.99, "trustworthy": True, "launch_bound": False, "gpu_busy_frac": 0.948},
        {"model": "qwen3.5-0.8b", "variant": "baseline", "tok_per_s": 14522.0, "step_s": 0.2821,
         "spread_pct": 26.2, "trustworthy": False, "launch_bound": True, "gpu_busy_frac": 0.457},
    ]  # fmt: skip
    rows[1].update(changes)
    return pd.DataFrame(rows)


def test_a_launch_bound_row_is_named_with_its_busy_share_and_what_to_measure():
    figures, notes = answer.figures({"carriers": _carriers()}, {}, {})
    [note] = notes
    assert note.startswith("qwen3.5-0.8b/baseline is launch-bound: the GPU is busy 46% of the step")
    assert "`--variant compile`" in note and "`--batch-size`" in note
    assert figures[1]["trust"].startswith("no (launch-bound")


def test_a_compiled_row_is_not_told_to_compile_and_gpu_bound_rows_get_no_note():
    _, notes = answer.figures({"carriers": _carriers(variant="compile")}, {}, {})
    [note] = notes
    assert "qwen3.5-0.8b/compile" in note and "--variant compile" not in note and "`--batch-size`" in note
    _, notes = answer.figures({"carriers": _carriers(launch_bound=False, gpu_busy_frac=0.95)}, {}, {})
    assert notes == []


def test_a_flag_stored_as_a_float_still_counts_and_no_timeline_claims_nothing():
    carriers = _carriers(launch_bound=1.0)  # a bool column with a NaN beside it is read back as floats
    figures, notes = answer.figures({"carriers": carriers}, {}, {})
    assert len(notes) == 1 and figures[1]["trust"].startswith("no (launch-bound")
    _, notes = answer.figures({"carriers": _carriers(launch_bound=None, gpu_busy_frac=None)}, {}, {})
    assert notes == []
