"""The `bucket` probe's answer: which bucket size wins 90% of the global sort's gain, at what diversity
price? Computed from the stored `sweep` table (runner.analysis shows it)."""

from __future__ import annotations

import pandas as pd

QUESTION = "bucket: which bucket size wins 90% of the global sort's gain, at what diversity price?"
TABLES = ("sweep",)
EXACT = True
"""No timing: any change from the previous run is reported."""
RATIO_OF = None


def figures(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    sweep = tables["sweep"].sort_values("bucket_size") if not tables["sweep"].empty else tables["sweep"]
    size = summary.get("bucket_size_90pct_gain")
    if sweep.empty or size is None or not (sweep["bucket_size"] == size).any():
        return [{"bucket_size_90pct_gain": size}], []
    pick = sweep[sweep["bucket_size"] == size].iloc[0]
    random, whole = sweep.iloc[0], sweep.iloc[-1]
    row = {
        "bucket_size_90pct_gain": int(size),
        "pad_pct": 100.0 * float(pick["pad_fraction"]),
        "random_pad_pct": 100.0 * float(random["pad_fraction"]),
        "global_sort_pad_pct": 100.0 * float(whole["pad_fraction"]),
        "sources_per_batch": float(pick["sources_per_batch"]),
        "random_sources_per_batch": float(random["sources_per_batch"]),
    }
    return [row], []
