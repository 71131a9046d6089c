"""A host that ran two configs in one run gets a bar (or line) per config, named by what differs:
before, its two carrier rows were drawn at one x position, its kernel categories summed into one bar
twice as long, and its scaling points joined into one zigzag line."""

from __future__ import annotations

import pandas as pd

import probes
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


def test_rows_of_one_name_never_share_a_bar():
    """matplotlib draws bars of one category name at one x: two rows of one host were drawn over each other."""
    rows = _carriers()
    fig = plots.host_bars(rows, [("step_s", "s/step", 1.0)], title="t", colors=COLORS)  # no labels: the hosts
    ax = fig.axes[0]
    positions = sorted(round(p.get_x() + p.get_width() / 2, 6) for p in ax.patches)
    assert positions == [0.0, 1.0, 2.0]
    assert sorted(round(p.get_height(), 6) for p in ax.patches) == [0.41, 0.52, 1.9]


def test_labels_name_every_shape_that_varies_and_never_merge_rows():
    rows = _carriers().assign(seq_len=[4096, 4096, 2048])
    assert bar_labels(rows).tolist()[2] == "gx10 (batch_size=4, seq_len=2048)"
    alike = pd.DataFrame({"host": ["gx10", "gx10"], "kernel_s_per_step": [0.2, 0.2]})
    assert bar_labels(alike).tolist() == ["gx10 #1", "gx10 #2"]
    assert bar_labels(alike, within=("not_a_column",)).tolist() == ["gx10 #1", "gx10 #2"]


def test_an_earlier_runs_row_is_named_by_its_run_not_by_a_missing_variant():
    rows = pd.DataFrame(
        {"host": ["gx10", "gx10"], "variant": [None, "baseline"], "run_id": ["r0", "r1"], "config_hash": ["a", "a"]}
    )
    assert bar_labels(rows).tolist() == ["gx10 (run_id=r0)", "gx10 (run_id=r1)"]


def test_a_float_column_made_by_a_missing_value_reads_as_integers():
    rows = pd.DataFrame({"host": ["gx10", "gx10"], "batch_size": [4.0, None]})
    assert bar_labels(rows).tolist() == ["gx10 (batch_size=4)", "gx10 (batch_size=n/a)"]


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


def test_the_scaling_lines_are_one_per_config_even_at_other_lengths_and_keep_the_hosts_colour():
    rows = pd.DataFrame(
        {
            "host": ["gx10"] * 4 + ["ana-ml2"] * 2,
            "batch_size": [4, 4, 1, 1, 1, 1],
            "seq_len": [1024, 2048, 4096, 8192, 1024, 2048],
            "step_s": [0.8, 1.6, 0.9, 2.0, 0.2, 0.4],
        }
    )
    labels = bar_labels(rows, within=("seq_len",))
    fig = plots.scaling_curves(rows, "seq_len", "step_s", title="t", colors=COLORS, labels=labels)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
    assert list(lines["gx10 (batch_size=4)"].get_ydata()) == [0.8, 1.6]
    assert list(lines["gx10 (batch_size=1)"].get_ydata()) == [0.9, 2.0]
    assert {lines[k].get_color() for k in lines if k.startswith("gx10")} == {COLORS["gx10"]}
    assert lines["ana-ml2 (batch_size=1)"].get_color() == COLORS["ana-ml2"]
    assert lines["gx10 (batch_size=4)"].get_marker() != lines["gx10 (batch_size=1)"].get_marker()


def _section(data, probe: str, kind: type) -> str:
    """The report's section of `kind` that `probe` declares, drawn."""
    from runner.analysis import report_html

    (section,) = [s for s in probes.presentation(probe).sections if isinstance(s, kind)]
    return report_html.section_html(data, probe, section)


def test_the_report_tables_split_a_host_that_ran_two_configs(monkeypatch):
    """Through the report's own sections: the kernel and scaling tables get a column per config, and
    the carrier bars are drawn with a label per config."""
    from runner.analysis.report_data import RunData

    drawn = []
    real = plots.host_bars
    monkeypatch.setattr(
        plots, "host_bars", lambda rows, metrics, **kw: drawn.append(kw["labels"]) or real(rows, metrics, **kw)
    )
    key = {"checkpoint": "qwen3-4b", "run_id": "r1"}
    kernels = pd.DataFrame(
        [{**key, "host": "gx10", "config_hash": h, "category": c, "kernel_s_per_step": v}
         for h, c, v in (("a", "gemm", 0.2), ("a", "attention", 0.1), ("b", "gemm", 0.8), ("b", "attention", 0.4))]
    )  # fmt: skip
    scaling = pd.DataFrame(
        [{**key, "host": "gx10", "batch_size": b, "seq_len": n, "step_s": t}
         for b, n, t in ((4, 1024, 0.8), (4, 2048, 1.6), (1, 4096, 0.9), (1, 8192, 2.0))]
    )  # fmt: skip
    carriers = _carriers().assign(checkpoint="qwen3-4b", run_id="r1", model="qwen3-4b", tok_per_s=[1e4, 8e3, 9e3])
    jobs = pd.DataFrame(columns=["probe", "status", "checkpoint", "host", "reason"])
    tables = {"profile.kernels": kernels, "profile.scaling": scaling, "carrier.carriers": carriers}
    data = RunData(run_id="r1", jobs=jobs, tables=tables, alerts=[], watched=[])
    page = _section(data, "profile", probes.CategoryBars).replace("<wbr>", "")
    assert "gx10 (config_hash=a)" in page and "gx10 (config_hash=b)" in page
    assert ">800.0<" in page and ">1000.0<" not in page  # b's gemm in ms a step, not a's and b's summed
    page = _section(data, "profile", probes.ScalingCurves).replace("<wbr>", "")
    assert "gx10 (batch_size=4)" in page and "gx10 (batch_size=1)" in page
    _section(data, "carrier", probes.HostTables)
    assert drawn and drawn[0].tolist() == ["ana-ml2 (batch_size=1)", "gx10 (batch_size=1)", "gx10 (batch_size=4)"]


def test_names_with_dollar_signs_are_drawn_as_written_not_as_math():
    """matplotlib reads `$...$` as math: a model named `q$\\frac$x` failed the report's whole rendering."""
    rows = _carriers().assign(model=["m", "q$\\frac$x", "m"], checkpoint="c$\\frac$")
    fig = plots.host_bars(
        rows, [("step_s", "s/step", 1.0)], title="c$\\frac$: per host", colors=COLORS, labels=bar_labels(rows)
    )
    assert plots.png_bytes(fig)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "gx10 (model=q$\\frac$x, batch_size=1)" in svg_text(fig)  # drawn as written (its `$` escaped)


def svg_text(fig) -> str:
    """The figure as SVG with its text as text (not paths), comments (matplotlib's source strings) dropped."""
    import io
    import re

    import matplotlib

    plots.literal_text(fig)
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buffer, format="svg")
    return re.sub(r"<!--.*?-->", "", buffer.getvalue(), flags=re.S)


def test_axes_numbers_are_typeset_and_names_drawn_as_written():
    """The bucket plot's log axis printed `$\\mathdefault{10^{1}}$` literally: every text was made literal, tick
    labels too. Names (hosts, checkpoints, the title, categories) stay literal, `$` and `_` included."""
    host = "a$\\frac$b_c"
    frame = pd.DataFrame(
        {
            "bucket_size": [8, 64, 1024] * 2,
            "pad_pct": [50.0, 10.0, 3.0, 40.0, 9.0, 2.0],
            "host": [host] * 3 + ["gx10"] * 3,
            "checkpoint": ["qwen3_4b"] * 6,
        }
    )
    fig = plots.sweep_lines(frame, x="bucket_size", y="pad_pct", series=["host", "checkpoint"], title="t $x$ _y")
    svg = svg_text(fig)
    assert "mathdefault" not in svg and "$" not in svg.replace(host, "").replace("t $x$ _y", "")
    assert f"{host} qwen3_4b" in svg and "t $x$ _y" in svg  # names as written
    ticks = fig.axes[0].get_xticklabels()
    assert ticks and all(t.get_parse_math() and t.get_text().startswith("$\\mathdefault{10^{") for t in ticks)
    bars = plots.grouped_bars(
        frame.assign(strategy=["s$1$", "s_2", "s3"] * 2),
        panel="checkpoint",
        group="strategy",
        value="pad_pct",
        colors={host: "C0", "gx10": "C1"},
        title="t",
    )
    svg = svg_text(bars)
    assert ">s$1$<" in svg and ">s_2<" in svg  # category ticks: names, drawn as written
