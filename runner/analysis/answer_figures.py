"""Each probe's headline figures from one job's stored rows (runner/analysis/answers.py uses them).

An extractor takes the job's tables (name -> its rows), its summary and its config, and returns the
figure rows (dicts, units in the names) and notes. It reads only columns the rows have, so rows of
an older or newer probe version give what they can rather than an error. Computation only.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from runner.analysis.drift import SPREAD_LIMIT_PCT

PROBE_ORDER = ("mask", "padding", "bucket", "carrier", "profile")
"""The order answers are shown in when no plan gives one."""
TABLES = {
    "mask": ("layers",),
    "padding": ("strategies",),
    "bucket": ("sweep",),
    "carrier": ("carriers",),
    "profile": ("fit",),
}
"""The tables each probe's answer is computed from."""
QUESTIONS = {
    "mask": "mask: does every layer keep the fast path, and do packed sequences stay apart?",
    "padding": "padding: how much of each batch is padding, per batching strategy?",
    "bucket": "bucket: which bucket size wins 90% of the global sort's gain, at what diversity price?",
    "carrier": "carrier: what does each model deliver here, and can the number be trusted?",
    "profile": "profile: where does the step's time go (each fit term's share at seq_len; padding penalty)?",
}
RATIO_OF = {"carrier": "tok_per_s", "profile": "step_s"}
"""What a host measures (the rest is analysis of the same inputs): ratios are given for these only."""
EXACT = ("mask", "padding", "bucket")
"""Probes whose figures are exact (no timing): any change from the previous run is reported."""
ROW_IDENTITY = ("model", "variant")
GENERIC_MAX = 8
"""Scalar summary figures shown for a probe without its own extractor."""


def layer_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5, 11, 12] -> '0-2, 5, 11-12'; [] -> 'none'."""
    out, layers = [], sorted(int(v) for v in layers)
    for value in layers:
        if out and value == out[-1][1] + 1:
            out[-1][1] = value
        else:
            out.append([value, value])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out) or "none"


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column].fillna(False).astype(bool) if column in frame else pd.Series(False, index=frame.index)


def mask(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    layers = tables["layers"]
    if layers.empty:
        return [{"layers": summary.get("num_layers")}], []
    sliding = layers["window"].notna() if "window" in layers else pd.Series(False, index=layers.index)
    # linear-attention and other layers have no mask: neither full nor sliding
    softmax = layers["kind"].fillna("softmax") == "softmax" if "kind" in layers else pd.Series(True, index=layers.index)
    full, slide = layers[~sliding & softmax], layers[sliding]
    slow = full[~_flag(full, "fast_path")]["layer"].tolist()
    leaks = layers[_flag(layers, "cross_sequence")]["layer"].tolist()
    row = {
        "seq_len": config.get("seq_len"),
        "padding": config.get("padding"),
        "layers": len(layers),
        "full_fast_path": f"{len(full) - len(slow)} of {len(full)}",
        "lose_fast_path": layer_ranges(slow),
        "sliding_band_ok": f"{int(_flag(slide, 'band_ok').sum())} of {len(slide)}" if len(slide) else "-",
        "cross_sequence": layer_ranges(leaks),
    }
    notes = []
    if slow and config.get("padding", "none") != "none":
        notes.append(
            f"padding {config['padding']}: the batch needs an explicit mask, so full layers lose "
            "the fast path by design"
        )
    return [row], notes


def padding(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    rows = tables["strategies"]
    if rows.empty:
        return [{k: v for k, v in summary.items() if k.startswith("pad_fraction_")}], []
    row: dict[str, Any] = {"max_length": _int(rows, "max_length")}
    for strategy, part in rows.groupby("strategy", sort=False):
        row[f"{strategy}_pad_pct"] = 100.0 * float(part["pad_fraction"].iloc[0])
    row["num_samples"] = _int(rows, "num_samples")
    row["truncated_samples"] = _int(rows, "truncated_samples")
    row["truncated_tokens"] = _int(rows, "truncated_tokens")
    return [row], []


def _int(frame: pd.DataFrame, column: str) -> int | None:
    if column not in frame or frame[column].isna().all():
        return None
    return int(frame[column].dropna().iloc[0])


def bucket(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
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


def carrier(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    rows = []
    for _, r in tables["carriers"].iterrows():
        row: dict[str, Any] = {k: _plain(r[k]) for k in ROW_IDENTITY if k in r.index}
        for column in ("tok_per_s", "step_s", "spread_pct"):
            row[column] = _plain(r.get(column))
        row["trust"] = _trust(r)
        status = str(r.get("status") or "ok")
        if status != "ok":
            row["status"] = status
        rows.append(row)
    advice = summary.get("advice") or []
    notes = [f"advice: {line}" for line in advice] if isinstance(advice, list) else []
    return rows, notes


def _trust(row: pd.Series) -> str:
    trust = _plain(row.get("trustworthy"))
    why = []
    if _plain(row.get("launch_bound")) is True:
        why.append("launch-bound")
    for column, what in (("spread_pct", "spread"), ("spread_across_pct", "processes disagree by")):
        spread = _plain(row.get(column))
        if isinstance(spread, float) and spread > SPREAD_LIMIT_PCT:
            why.append(f"{what} {spread:.1f}% > {SPREAD_LIMIT_PCT:g}%")
    if trust is None:
        return "unknown" + (f" ({', '.join(why)})" if why else "")
    return "yes" if trust and not why else "no" + (f" ({', '.join(why)})" if why else "")


def profile(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    row: dict[str, Any] = {"seq_len": summary.get("seq_len"), "step_s": summary.get("step_s")}
    fit = tables["fit"]
    for _, term in fit.iterrows():
        row[f"{term['term']}_pct"] = _plain(term.get("share_at_production_pct"))  # share at seq_len
    row["heldout_err_pct"] = summary.get("max_heldout_err_pct")
    row["penalty_same_shape_pct"] = summary.get("padding_penalty_same_shape_pct")
    row["penalty_same_tokens_pct"] = summary.get("padding_penalty_same_tokens_pct")
    notes = []
    if summary.get("launch_bound_lens"):
        notes.append(f"left out of the fit as launch-bound: seq_len {summary['launch_bound_lens']}")
    return [row], notes


def generic(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return [dict(list(scalars.items())[:GENERIC_MAX])], []


EXTRACTORS = {"mask": mask, "padding": padding, "bucket": bucket, "carrier": carrier, "profile": profile}


def row_identity(row: dict[str, Any]) -> tuple:
    return tuple(row.get(k) for k in ROW_IDENTITY)


def changes(probe: str, before: list[dict], after: list[dict], run_id: str, new_checkpoint: bool) -> list[str]:
    """The exact figures that differ from the previous ok run's (timings are drift's business)."""
    if probe not in EXACT:
        return []
    old = {row_identity(r): r for r in before}
    out = []
    for row in after:
        prev = old.get(row_identity(row), {})
        for key, value in row.items():
            if key in prev and not _same(prev[key], value):
                out.append(f"{key} {_show(prev[key])} -> {_show(value)}")
    if out and new_checkpoint:
        out.append("(the checkpoint's content changed)")
    return [f"since run {run_id}: " + "; ".join(out)] if out else []


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(a) and math.isnan(b))
    return a == b


def _show(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _plain(value: Any) -> Any:
    """numpy scalars as Python values; NaN as None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
