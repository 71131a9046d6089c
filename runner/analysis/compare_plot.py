"""`labprobe compare --plot FILE`: grouped bars, one group per checkpoint (and row group), one bar per
host, each non-baseline bar annotated with its ratio to the baseline. Presentation only.

(runner.analysis.plots holds the report's and history's figures; this is compare's own.)
"""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from probes.result import InputError
from runner.analysis import plots
from runner.analysis.compare import Comparison, better

COLORS = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")


def plot_comparison(result: Comparison, path: Path) -> Path:
    if any(isinstance(v, str) for r in result.rows for v in r["values"].values()):
        raise InputError(f"--plot: {result.table}.{result.metric} is worded, not a number: nothing to draw")
    labels = [f"{r['checkpoint']}\n{r['group']}" if r["group"] else r["checkpoint"] for r in result.rows]
    num_hosts = len(result.hosts)
    fig = Figure(figsize=(max(6.0, 1.5 + (0.5 * num_hosts + 0.6) * len(labels)), 4.2), layout="constrained")
    ax = fig.add_subplot()
    top = max((v for r in result.rows for v in r["values"].values()), default=1.0) or 1.0
    _host_bars(ax, result, len(labels))
    ax.set_xticks(range(len(labels)), [lab.replace(" ", "\n") for lab in labels], fontsize=8)
    direction = better(result.metric)
    ax.set_ylabel(f"{result.metric} ({direction})" if direction else result.metric)
    ax.set_ylim(0, top * 1.15)
    ax.set_title(f"{result.probe}: {result.table}.{result.metric} by host, ratio to {result.baseline}")
    ax.legend(fontsize=8, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.spines[["top", "right"]].set_visible(False)
    if any(any(r.get("untrusted", {}).values()) for r in result.rows):
        ax.text(
            1.0,
            0.5,
            "hatched: spread > 2%,\nnot yet a number",
            transform=ax.transAxes,
            fontsize=8,
            va="top",
            ha="left",
            color="#555555",
        )
    if result.warnings:
        fig.text(
            0.01,
            -0.02,
            f"{len(result.warnings)} warning(s): " + "; ".join(result.warnings)[:180],
            fontsize=7,
            color="#C44E52",
            va="top",
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    plots.literal_text(fig).savefig(path, dpi=120, bbox_inches="tight")
    return path


def _host_bars(ax, result: Comparison, num_groups: int) -> None:
    """One bar per host in each group, hatched where untrusted, each non-baseline bar labelled with its ratio."""
    num_hosts = len(result.hosts)
    width = 0.8 / num_hosts
    for k, host in enumerate(result.hosts):
        xs = [i + (k - (num_hosts - 1) / 2) * width for i in range(num_groups)]
        values = [r["values"].get(host, float("nan")) for r in result.rows]
        name = f"{host} ({result.gpus[host]})" if result.gpus.get(host) else host
        hatches = ["//" if r.get("untrusted", {}).get(host) else "" for r in result.rows]
        bars = ax.bar(
            xs,
            values,
            width * 0.92,
            label=name + (" = baseline" if host == result.baseline else ""),
            color=COLORS[k % len(COLORS)],
            hatch=hatches,
            edgecolor="white",
        )
        for bar, row in zip(bars, result.rows):
            ratio = row["ratios"].get(host)
            if host != result.baseline and ratio is not None:
                ax.annotate(
                    f"{ratio:.2f}×",
                    (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    xytext=(0, 2),
                    textcoords="offset points",
                    ha="center",
                    va="bottom",
                    fontsize=8,
                )
