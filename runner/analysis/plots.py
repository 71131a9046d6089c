"""Plots for the report and `labprobe history`, drawn with matplotlib's Agg canvas.

Figures are built with `matplotlib.figure.Figure` directly, never pyplot: no global figure state,
no GUI backend, safe in a sweep's process. Each function returns a Figure; `png_bytes` and
`data_uri` turn it into what a file or a self-contained HTML page needs.
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

import pandas as pd
from matplotlib.category import StrCategoryFormatter
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, Formatter, FuncFormatter

LINE_MARKERS = "os^Dv"
"""One host's lines, one per config, in its one colour."""
UNTRUSTED_HATCH = "//"
"""Bars whose spread is above the trust threshold are hatched: not yet a number."""


def literal_text(fig: Figure) -> Figure:
    """Names drawn as written, axes' numbers as matplotlib typesets them. matplotlib reads `$...$` as math, so
    a model, host or checkpoint named with two `$` (`a$\\frac$b`) failed the whole report's rendering, or was
    typeset: every title, label and legend entry is drawn literally. Tick labels are left to mathtext (a log
    axis writes `$\\mathdefault{10^{1}}$`: drawn literally it printed that), except ticks named by the figure
    (categories: a host, a strategy), whose `$` are escaped."""
    ticks: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_formatter(_literal_names(axis.get_major_formatter()))
            axis.set_minor_formatter(_literal_names(axis.get_minor_formatter()))
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks |= {id(tick.label1), id(tick.label2)}
    for text in fig.findobj(Text):
        if id(text) not in ticks:
            text.set_parse_math(False)
    return fig


NAMED_TICKS = (FixedFormatter, FuncFormatter, StrCategoryFormatter)
"""Formatters whose ticks are names (`set_xticks(positions, names)`, categories), not numbers."""


def _literal_names(formatter: Formatter) -> Formatter:
    """A formatter of names escaped for mathtext; a formatter of numbers as it is."""
    if not isinstance(formatter, NAMED_TICKS) or getattr(formatter, "literal_names", False):
        return formatter
    escaped = FuncFormatter(lambda x, pos=None: literal_math(str(formatter(x, pos))))
    escaped.literal_names = True
    return escaped


def literal_math(name: str) -> str:
    """A name inside text matplotlib parses as math: each `$` escaped, so it is drawn as written."""
    return name.replace("\\$", "$").replace("$", "\\$")


def png_bytes(fig: Figure, *, dpi: int = 90) -> bytes:
    literal_text(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi, bbox_inches="tight")
    return buffer.getvalue()


def data_uri(fig: Figure) -> str:
    return "data:image/png;base64," + base64.b64encode(png_bytes(fig)).decode("ascii")


def save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(fig, dpi=110))
    return path


def host_colors(hosts: list[str]) -> dict[str, str]:
    """One colour per host, the same in every figure of a report."""
    return {h: f"C{i % 10}" for i, h in enumerate(sorted(hosts))}


def host_bars(
    frame: pd.DataFrame,
    metrics: list[tuple[str, str, float]],
    *,
    title: str,
    colors: dict[str, str],
    untrusted: pd.Series | None = None,
    labels: pd.Series | None = None,
) -> Figure:
    """One panel per metric (column, label, scale), one bar per row, named by `labels` (default: the host),
    coloured by host."""
    fig = Figure(figsize=(3.2 * len(metrics), 2.8), layout="constrained")
    axes = fig.subplots(1, len(metrics), squeeze=False)[0]
    hosts = frame["host"].astype(str).tolist()
    names = hosts if labels is None else labels.astype(str).tolist()
    for ax, (column, label, scale) in zip(axes, metrics):
        values = pd.to_numeric(frame[column], errors="coerce").astype(float) * scale
        # positions, not category names: matplotlib draws rows of one name at one x, the bars over each other
        bars = ax.bar(range(len(names)), values.fillna(0.0), color=[colors.get(h, "C7") for h in hosts])
        ax.set_xticks(range(len(names)), names)
        if untrusted is not None:
            for bar, bad in zip(bars, untrusted.tolist()):
                if bad:
                    bar.set_hatch(UNTRUSTED_HATCH)
                    bar.set_edgecolor("black")
        ax.bar_label(bars, labels=[f"{v:.3g}" if pd.notna(v) else "n/a" for v in values], fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.tick_params(axis="x", labelrotation=20, labelsize=8)
        ax.margins(y=0.15)
    fig.suptitle(title, fontsize=10)
    return fig


def scaling_curves(
    frame: pd.DataFrame,
    x: str,
    y: str,
    *,
    title: str,
    colors: dict[str, str],
    fit: str | None = None,
    labels: pd.Series | None = None,
) -> Figure:
    """`y` against `x`, one line per `labels` value (runner.analysis.report_plots.bar_labels: the host, and
    the config where a host ran several), in the host's colour; the fitted values (`fit` column) dashed."""
    fig = Figure(figsize=(5.5, 3.3), layout="constrained")
    ax = fig.subplots()
    names = frame["host"].astype(str) if labels is None else labels.astype(str)
    lines_of: dict[str, int] = {}
    for name, rows in frame.groupby(names, sort=True):
        rows = rows.sort_values(x)
        # a host keeps its colour in every figure of the report: its second config gets another marker
        own = rows["host"].astype(str).iloc[0]
        marker = LINE_MARKERS[lines_of.get(own, 0) % len(LINE_MARKERS)]
        lines_of[own] = lines_of.get(own, 0) + 1
        color = colors.get(own, "C7")
        ax.plot(rows[x], pd.to_numeric(rows[y], errors="coerce"), marker=marker, color=color, label=str(name))
        if fit and fit in rows and pd.to_numeric(rows[fit], errors="coerce").notna().any():
            ax.plot(
                rows[x],
                pd.to_numeric(rows[fit], errors="coerce"),
                linestyle="--",
                color=color,
                alpha=0.7,
                label=f"{name} fit",
            )
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def stacked_categories(
    frame: pd.DataFrame,
    *,
    category: str,
    value: str,
    scale: float,
    unit: str,
    title: str,
    labels: pd.Series | None = None,
) -> Figure:
    """One horizontal bar per `labels` value (the host where a host ran one config), stacked by category."""
    names = frame["host"].astype(str) if labels is None else labels.astype(str)
    table = frame.assign(_bar=names).pivot_table(
        index="_bar", columns=category, values=value, aggfunc="sum", fill_value=0.0
    )
    table = table[table.sum().sort_values(ascending=False).index] * scale
    fig = Figure(figsize=(7.0, 0.6 + 0.45 * len(table) + 0.6), layout="constrained")
    ax = fig.subplots()
    left = pd.Series(0.0, index=table.index)
    for i, name in enumerate(table.columns):
        ax.barh(table.index.astype(str), table[name], left=left, color=f"C{i % 10}", label=str(name))
        left = left + table[name]
    ax.set_xlabel(unit)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncols=3, loc="upper center", bbox_to_anchor=(0.5, -0.35 if len(table) < 3 else -0.2))
    return fig


def history_lines(drift: pd.DataFrame, metric: str, *, label_columns: list[str], title: str) -> Figure:
    """A metric over runs, one line per series; alerts ringed in red."""
    fig = Figure(figsize=(7.0, 3.6), layout="constrained")
    ax = fig.subplots()
    for i, (key, rows) in enumerate(drift.groupby(label_columns, sort=True, dropna=False)):
        key = key if isinstance(key, tuple) else (key,)
        ax.plot(rows["finished_at"], rows["value"], marker=".", color=f"C{i % 10}", label=" ".join(str(k) for k in key))
        alerts = rows[rows["alert"]]
        ax.scatter(
            alerts["finished_at"], alerts["value"], s=120, facecolors="none", edgecolors="red", linewidths=1.5, zorder=3
        )
    ax.set_ylabel(metric)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.autofmt_xdate()
    return fig


def grouped_bars(
    frame: pd.DataFrame, *, panel: str, group: str, value: str, colors: dict[str, str], title: str
) -> Figure:
    """One panel per `panel` value (checkpoint), in it one group of bars per `group` value (strategy)
    and one bar per host: the report's host comparison of a probe's answer (medians of a host's rows)."""
    panels = sorted(frame[panel].astype(str).unique())
    hosts = sorted(frame["host"].astype(str).unique())
    fig = Figure(figsize=(min(11.0, 1.0 + 3.0 * len(panels)), 3.2), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False, sharey=True)[0]
    width = 0.8 / len(hosts)
    for ax, name in zip(axes, panels):
        table = frame[frame[panel].astype(str) == name].pivot_table(
            index=group, columns="host", values=value, aggfunc="median"
        )
        for k, host in enumerate(hosts):
            xs = [i + (k - (len(hosts) - 1) / 2) * width for i in range(len(table))]
            ys = table[host].astype(float) if host in table else [float("nan")] * len(table)
            ax.bar(xs, ys, width * 0.92, color=colors.get(host, "C7"), label=host)
        ax.set_xticks(range(len(table)), [str(i) for i in table.index], fontsize=8)
        ax.set_title(name.replace(" = ", " =\n"), fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel(value)
    axes[-1].legend(fontsize=8, title="host", title_fontsize=8)
    fig.suptitle(title, fontsize=10)
    return fig


def sweep_lines(frame: pd.DataFrame, *, x: str, y: str, series: list[str], title: str) -> Figure:
    """`y` against `x`, one line per distinct `series` values (host and checkpoint)."""
    fig = Figure(figsize=(6.0, 3.3), layout="constrained")
    ax = fig.subplots()
    for i, (key, rows) in enumerate(frame.groupby(series, sort=True)):
        key = key if isinstance(key, tuple) else (key,)
        rows = rows.sort_values(x)
        ax.plot(
            rows[x],
            pd.to_numeric(rows[y], errors="coerce"),
            marker=".",
            color=f"C{i % 10}",
            label=" ".join(map(str, key)),
        )
    ax.set_xscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig
