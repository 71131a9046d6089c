"""A host that ran two configs in one run gets a bar (or line) per config, named by what differs:
before, its two carrier rows were drawn at one x position, its kernel categories summed into one bar
twice as long, and its scaling points joined into one zigzag line."""

from __future__ import annotations

import pandas as pd

from runner.analysis import plots
from runner.analysis.report_plots import bar_labels

COLORS = {"gx10": "C0", "ana-ml2": "C1"}


def _carriers() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "host": ["ana-ml2", "gx10", "gx10"],
            "checkpoint": ["qwen3-4b"] * 3,
            "batch_size": [1, 1, 4],
            "seq_len": [4096, 4096, 4096],
            "config_hash": ["a", "a", "b"],
            "step_s": [0.41, 0.52, 1.90],
        }
    )


def test_a_host_with_one_row_is_named_by_its_host_alone():
    rows = _carriers().iloc[:2]
    assert bar_labels(rows).tolist() == ["ana-ml2", "gx10"]


def test_two_configs_of_one_host_are_named_by_the_shape_that_differs():
    labels = bar_labels(_carriers()).tolist()
    assert labels == ["ana-ml2 (batch_size=1)", "gx10 (batch_size=1)", "gx10 (batch_size=4)"]


def test_a_difference_outside_the_shapes_falls_back_to_the_config_hash():
    rows = _carriers().assign(batch_size=1)
    assert bar_labels(rows).tolist()[1:] == ["gx10 (config_hash=a)", "gx10 (config_hash=b)"]


def test_the_carrier_bars_give_each_config_its_own_bar():
    rows = _carriers()
    fig = plots.host_bars(rows, [("step_s", "s/step", 1.0)], title="t", colors=COLORS, labels=bar_labels(rows))
    ax = fig.axes[0]
    positions = sorted(round(p.get_x() + p.get_width() / 2, 6) for p in ax.patches)
    assert positions == [0.0, 1.0, 2.0]  # three bars, none drawn over another
    assert [t.get_text() for t in ax.get_xticklabels()][2] == "gx10 (batch_size=4)"
    assert sorted(round(p.get_height(), 6) for p in ax.patches) == [0.41, 0.52, 1.9]


def test_the_kernel_bars_never_add_two_configs_together():
    rows = pd.DataFrame(
        {
            "host": ["gx10"] * 4,
            "checkpoint": ["qwen3-4b"] * 4,
            "batch_size": [1, 1, 4, 4],
            "category": ["gemm", "attention", "gemm", "attention"],
            "kernel_s_per_step": [0.2, 0.1, 0.8, 0.4],
        }
    )
    labels = bar_labels(rows, within=("category",))
    fig = plots.stacked_categories(
        rows, category="category", value="kernel_s_per_step", scale=1.0, unit="s", title="t", labels=labels
    )
    ends: dict[float, float] = {}
    for p in fig.axes[0].patches:
        ends[p.get_y()] = max(ends.get(p.get_y(), 0.0), p.get_x() + p.get_width())
    assert sorted(round(v, 6) for v in ends.values()) == [0.3, 1.2]  # one bar per config, not one of 1.5


def test_the_scaling_lines_are_one_per_config():
    rows = pd.DataFrame(
        {
            "host": ["gx10"] * 4,
            "batch_size": [1, 1, 4, 4],
            "seq_len": [1024, 2048, 1024, 2048],
            "step_s": [0.1, 0.2, 0.4, 0.8],
        }
    )
    labels = bar_labels(rows, within=("seq_len",))
    fig = plots.scaling_curves(rows, "seq_len", "step_s", title="t", colors=COLORS, labels=labels)
    lines = fig.axes[0].get_lines()
    assert [list(line.get_ydata()) for line in lines] == [[0.1, 0.2], [0.4, 0.8]]
    assert [line.get_label() for line in lines] == ["gx10 (batch_size=1)", "gx10 (batch_size=4)"]
