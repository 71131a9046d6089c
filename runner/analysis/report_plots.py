"""The report's host comparisons of the CPU probes' answers, as plots (presentation only).

The carriers' bars, the scaling fits and the kernel categories are drawn in report_html.py; here,
what the other probes' tables allow: padding's pad fraction per batching strategy (one bar per host,
grouped by checkpoint and strategy) and bucket's sweep (pad fraction against bucket size, one line
per host and checkpoint). Checkpoints whose rows are identical (the same tokenizer over the same
corpus gives the same lengths) are drawn once, named together.
"""

from __future__ import annotations

import html

import pandas as pd

from runner.analysis import plots
from runner.analysis.drift import DIMENSIONS
from runner.analysis.report_data import RunData

PLOTTED = {"padding.strategies": ("strategy", "pad_fraction", "padding: pad fraction per batching strategy, by host")}
SWEEPS = {"bucket.sweep": ("bucket_size", "pad_fraction", "bucket: pad fraction against bucket size")}


def comparisons_html(data: RunData, img) -> str:
    """`img(fig, alt)` -> an <img> tag (report_html's)."""
    parts = []
    for name, (group, value, title) in PLOTTED.items():
        frame = data.tables.get(name)
        if frame is not None and {group, value} <= set(frame):
            frame = merge_identical(frame, [group, value])
            fig = plots.grouped_bars(
                frame, panel="checkpoint", group=group, value=value, colors=data.colors, title=title
            )
            parts.append(img(fig, title))
    for name, (x, y, title) in SWEEPS.items():
        frame = data.tables.get(name)
        if frame is not None and {x, y} <= set(frame):
            frame = merge_identical(frame, [x, y])
            parts.append(img(plots.sweep_lines(frame, x=x, y=y, series=["host", "checkpoint"], title=title), title))
    if not parts:
        return ""
    return "<h2>Host comparison</h2>" + "".join(parts)


def merge_identical(frame: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Per host, checkpoints whose `columns` hold the same rows become one, named `a = b = c`."""
    out = []
    for _, rows in frame.groupby("host", sort=True):
        seen: dict[str, list[str]] = {}
        for checkpoint, part in rows.groupby("checkpoint", sort=True):
            key = part[columns].sort_values(columns).to_csv(index=False)
            seen.setdefault(key, []).append(str(checkpoint))
        for names in seen.values():
            part = rows[rows["checkpoint"] == names[0]].copy()
            part["checkpoint"] = " = ".join(names)
            out.append(part)
    return pd.concat(out, ignore_index=True) if out else frame


def bar_labels(rows: pd.DataFrame, within: tuple[str, ...] = ()) -> pd.Series:
    """What names each host's bar (or line): the host, and where one host has several rows per
    `within` values (two shapes, two configs, an earlier run's rows beside this run's), the shape or
    config that tells them apart, so two configs never stack on one bar or zigzag on one line."""
    hosts = rows["host"].astype(str)
    keys = ["host", *within]
    if not rows.duplicated(keys).any():
        return hosts
    tellers = [c for c in sorted(DIMENSIONS) if c in rows and c not in within]
    tellers += [c for c in ("variant", "config_hash", "run_id", "job_id") if c in rows]
    named: list[str] = []
    for column in tellers:
        if rows.groupby(keys, dropna=False)[column].nunique(dropna=False).max() > 1:
            named.append(column)
            if not rows.duplicated([*keys, *named]).any():
                break
    if not named:
        return hosts
    said = rows[named].astype(str).apply(lambda r: ", ".join(f"{c}={v}" for c, v in r.items()), axis=1)
    return hosts + " (" + said + ")"


def marked(frame: pd.DataFrame, run_id: str) -> pd.DataFrame:
    """A `run` column where some rows are an earlier run's: which run, or `this run`."""
    if "run_id" not in frame or (frame["run_id"].astype(str) == run_id).all():
        return frame
    runs = frame["run_id"].astype(str).map(lambda r: "this run" if r == run_id else f"earlier: {r}")
    return frame.assign(run=runs)


def runs_note(data: RunData) -> str:
    """One line above the plots saying which earlier runs' rows they show, if any."""
    earlier = sorted(set(data.shown["run_id"].astype(str)) - {data.run_id}) if not data.shown.empty else []
    if not earlier:
        return ""
    return (
        '<p class="muted">Answers, rows and plots of work this run did not do ok are the newest ok earlier '
        f"run's: {html.escape(', '.join(earlier))}.</p>"
    )
