"""The `mask` probe's answer: does every full layer keep SDPA's fast path, every sliding layer its band,
and do packed sequences stay apart? Computed from the stored `layers` table (runner.analysis shows it)."""

from __future__ import annotations

import pandas as pd

QUESTION = "mask: does every layer keep the fast path, and do packed sequences stay apart?"
TABLES = ("layers",)
EXACT = True
"""No timing: any change from the previous run is reported."""
RATIO_OF = None


def layer_ranges(layers: list[int]) -> str:
    """[0, 1, 2, 5, 11, 12] -> '0-2, 5, 11-12'; [] -> 'none'."""
    out, layers = [], sorted(int(v) for v in layers)
    for value in layers:
        if out and value == out[-1][1] + 1:
            out[-1][1] = value
        else:
            out.append([value, value])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out) or "none"


def fast_path_words(kept: int, full: int, no_flash: pd.DataFrame) -> str:
    """The one wording of the fast-path fact, as the sweep's table, compare, the report and the docs say it:
    `28 of 28`, or, where layers keep the maskless is_causal call that flash cannot run (Gemma-4's head_dim
    512), `5 of 5 (not flash: head_dim 512, efficient kernel)`: the fast path kept, its kernel named."""
    words = f"{kept} of {full}"
    if no_flash.empty:
        return words
    dims = sorted({int(d) for d in no_flash["head_dim"].dropna()}) if "head_dim" in no_flash else []
    kernels = sorted(set(no_flash["expected_backend"].dropna().astype(str))) if "expected_backend" in no_flash else []
    said = [f"head_dim {', '.join(map(str, dims))}"] if dims else []
    said += [f"{' / '.join(kernels)} kernel"] if kernels else []
    return f"{words} (not flash: {', '.join(said) or 'not eligible'})"


def _flag(frame: pd.DataFrame, column: str) -> pd.Series:
    return frame[column].fillna(False).astype(bool) if column in frame else pd.Series(False, index=frame.index)


def figures(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> tuple[list[dict], list[str]]:
    layers = tables["layers"]
    if layers.empty:
        return [{"layers": summary.get("num_layers")}], []
    sliding = layers["window"].notna() if "window" in layers else pd.Series(False, index=layers.index)
    # linear-attention and other layers have no mask: neither full nor sliding
    softmax = layers["kind"].fillna("softmax") == "softmax" if "kind" in layers else pd.Series(True, index=layers.index)
    full, slide = layers[~sliding & softmax], layers[sliding]
    # the fast path is the maskless is_causal call (flash eligibility is the `fast_path` column's own matter)
    lost = full["mask"].astype(str) != "none" if "mask" in full else ~_flag(full, "fast_path")
    slow = full[lost]["layer"].tolist()
    no_flash = full[~lost & ~_flag(full, "fast_path")] if "mask" in full else full.iloc[:0]
    leaking = layers[_flag(layers, "cross_sequence")]
    leaks = leaking["layer"].tolist()
    row = {
        "seq_len": config.get("seq_len"),
        "padding": config.get("padding"),
        "use_cache": _use_cache(config) if config.get("padding") == "packed" else None,
        "layers": len(layers),
        "full_fast_path": fast_path_words(len(full) - len(slow), len(full), no_flash),
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
    kinds = set(leaking["kind"].fillna("softmax")) if "kind" in layers else {"softmax"}
    if leaks and "softmax" in kinds and config.get("use_cache") is not False:
        notes.append(
            "packed with use_cache=True: a cache turns packing detection off; use_cache=False keeps the "
            "softmax layers apart"
        )
    if leaks and "linear" in kinds:
        notes.append(
            "linear-attention layers carry their state across packed sequences whatever use_cache says: "
            "see no_cross_sequence's detail"
        )
    return [row], notes


def _use_cache(config: dict) -> str:
    """What the forward got: unset is the model config's default (True for the causal LMs here)."""
    value = config.get("use_cache")
    return "config default" if value is None else str(value)
