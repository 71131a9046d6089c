"""The report's host comparisons of the probes' answers, as plots (presentation only).

Each probe declares its plots (`Presentation.plots`, probes/<name>/present.py); here they are drawn, probes in
the registry's order: grouped bars (one bar per host, grouped by checkpoint and a label such as padding's
batching strategy) and sweep lines (one line per host and checkpoint, such as bucket's pad fraction against
bucket size). Checkpoints whose rows are identical (the same tokenizer over the same corpus gives the same
lengths) are drawn once, named together. The sections of a probe's own (carriers, scaling, kernels) are
drawn in report_html.py.
"""

from __future__ import annotations

import html

import pandas as pd

import probes
from probes.result import plain
from runner.analysis import plots
from runner.analysis.drift import DIMENSIONS
from runner.analysis.report_data import RunData


def comparisons_html(data: RunData, img) -> str:
    """`img(fig, alt)` -> an <img> tag (report_html's)."""
    parts = []
    for probe in probes.REGISTRY:
        for plot in probes.presentation(probe).plots:
            frame = data.tables.get(f"{probe}.{plot.table}")
            if isinstance(plot, probes.GroupedBars) and frame is not None and {plot.group, plot.value} <= set(frame):
                frame = merge_identical(frame, [plot.group, plot.value])
                fig = plots.grouped_bars(
                    frame, panel="checkpoint", group=plot.group, value=plot.value, colors=data.colors, title=plot.title
                )
                parts.append(img(fig, plot.title))
            elif isinstance(plot, probes.SweepLines) and frame is not None and {plot.x, plot.y} <= set(frame):
                frame = merge_identical(frame, [plot.x, plot.y])
                fig = plots.sweep_lines(frame, x=plot.x, y=plot.y, series=["host", "checkpoint"], title=plot.title)
                parts.append(img(fig, plot.title))
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


LABEL_SHAPES = ("model", *sorted(DIMENSIONS))
"""What names a host's bars apart where it has several: the model of a family, then its shape."""
LABEL_CONFIG = ("variant", "config_hash")
"""Named where the names so far leave two of them under one label: two configs are never one line."""
LABEL_LAST = ("run_id", "job_id")
"""Named only where rows would still be alike (opaque, but never two rows on one bar)."""


def bar_labels(rows: pd.DataFrame, within: tuple[str, ...] = ()) -> pd.Series:
    """What names each host's bar (or line): the host, plus every model or shape that varies within it,
    the variant or config hash where those leave two configs under one name, a run or job id where rows
    would still be alike, and a number where nothing tells them apart. `within` columns are what the chart
    itself draws (a line's x, a stacked bar's category). So two configs never stack on one bar or join in
    one line."""
    within = tuple(c for c in within if c in rows)
    named = [c for c in LABEL_SHAPES if c in rows and c not in within and _mixed(rows, ["host"], c)]
    named += [c for c in LABEL_CONFIG if c in rows and _mixed(rows, ["host", *named], c)]
    for column in LABEL_LAST:
        if column in rows and _alike(rows, ["host", *named, *within]) and _mixed(rows, ["host"], column):
            named.append(column)
    labels = rows["host"].astype(str)
    if named:
        said = rows[named].apply(lambda r: ", ".join(f"{c}={_value(c, v)}" for c, v in r.items()), axis=1)
        labels = labels + " (" + said.astype(str) + ")"
    labelled = rows.assign(_label=labels)
    if _alike(labelled, ["_label", *within]):
        labels = labels + " #" + (labelled.groupby(["_label", *within]).cumcount() + 1).astype(str)
    return labels


def _mixed(rows: pd.DataFrame, keys: list[str], column: str) -> bool:
    """Some group of `keys` holds more than one value of `column` (as labels read them)."""
    values = rows[column].map(lambda v: _value(column, v))
    return bool(values.groupby([rows[k].astype(str) for k in keys]).nunique().max() > 1)


def _alike(rows: pd.DataFrame, keys: list[str]) -> bool:
    """Some rows share every one of `keys`' values (read as text: NaN equals NaN)."""
    return bool(rows[keys].astype(str).duplicated().any())


def _value(column: str, value) -> str:
    """A label's value as people read it: a stored float of an integer column (a NaN made it float) as an
    integer, a missing variant as `baseline` (rows stored before variants existed are baseline rows)."""
    value = plain(value)
    if value is None:
        return "baseline" if column == "variant" else "n/a"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


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
