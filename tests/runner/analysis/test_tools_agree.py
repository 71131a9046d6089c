"""The store's tools agree on the demo's recorded H200 sample: compare and history take the same filters and
show the same variant; history draws one line per host x variant; hours compare in the lab's budget's terms
(the two loans' 4B baseline at x1.000, not the x0.500 their stored hours, each job's own budget, gave)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner import cli
from runner.analysis import plots
from runner.analysis.drift import drift_table
from runner.analysis.history import plot_labels
from runner.chores.sample import load_sample
from runner.cli.options import OneLineParser
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
FILTERS = ("--probe", "--metric", "--host", "--checkpoint", "--variant")


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("sample") / "store"
    load_sample(Store(root))
    return root


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def options(command: str) -> dict[str, str | None]:
    """Each option of the command with its action: the filters must be spelled and repeat alike."""
    module = __import__(f"runner.cli.{command}", fromlist=["add_arguments"])
    parser = OneLineParser(prog=f"labprobe {command}")
    module.add_arguments(parser)
    return {s: type(a).__name__ for a in parser._actions for s in a.option_strings}


def test_compare_and_history_take_the_same_filters():
    compare, history = options("compare"), options("history")
    for option in FILTERS:
        assert compare[option] == history[option], option
    assert {compare[o] for o in ("--host", "--checkpoint", "--variant")} == {"_AppendAction"}


def test_the_same_filters_give_the_same_rows_and_the_variant_column(sample, capsys):
    where = ["--probe", "carrier", "--metric", "step_s", "--host", "h200-0412", "--checkpoint", "qwen3-4b-base"]
    where += ["--variant", "compile", "--variant", "baseline", "--store", sample]
    code, out, _ = run(capsys, "compare", *where, "--json")
    compared = json.loads(out)
    assert code == 0 and compared["hosts"] == ["h200-0412"]
    groups = {r["group"]: r["values"]["h200-0412"] for r in compared["rows"]}
    assert set(groups) == {"variant=baseline", "variant=compile"}
    code, out, _ = run(capsys, "history", *where, "--json")
    rows = json.loads(out)["rows"]
    assert code == 0 and {r["variant"] for r in rows} == {"baseline", "compile"}
    assert {(r["host"], r["checkpoint"]) for r in rows} == {("h200-0412", "qwen3-4b-base")}
    newest = {r["variant"]: r for r in sorted(rows, key=lambda r: r["finished_at"])}
    for variant, value in groups.items():  # compare shows the newest run of the slot: history's last value
        assert newest[variant.split("=")[1]]["value"] == pytest.approx(value)
    code, text, _ = run(capsys, "history", *where)
    header = next(line for line in text.splitlines() if line.startswith("variant "))
    assert header.split()[:2] == ["variant", "finished_at"]
    for command in ("compare", "history"):
        code, _, err = run(capsys, command, "--probe", "carrier", "--host", "gx10", "--store", sample)
        assert code == 2 and "--host 'gx10': none in" in err and "h200-0312, h200-0412" in err


def test_history_draws_one_line_per_host_and_variant(sample):
    frame = Store(sample).read("carrier.carriers")
    frame = frame[frame["checkpoint"] == "qwen3-4b-base"]
    drift = drift_table(frame, "step_s")
    figure = plots.history_lines(drift, "step_s", label_columns=plot_labels(drift, drift.attrs["by"]), title="t")
    labels = [line.get_label() for line in figure.axes[0].get_lines()]
    pairs = set(zip(frame["host"], frame["variant"], strict=True))
    assert len(labels) == len(set(labels)) == len(pairs) == 8  # 7 variants on h200-0412, the baseline on h200-0312
    for host, variant in pairs:
        assert sum(label.startswith(f"{host} qwen3-4b-base {variant} ") for label in labels) == 1
    for line in figure.axes[0].get_lines():  # each line one series: its points in time order, none repeated
        xs = list(line.get_xdata())
        assert xs == sorted(xs) and len(xs) == len(set(xs))


def test_hours_compare_for_the_labs_budget_not_each_jobs_own(sample, capsys):
    argv = ["compare", "--probe", "carrier", "--metric", "hours_sweep", "--variant", "baseline", "--store", sample]
    code, out, _ = run(capsys, *argv, "--cluster", REPO / "cluster.yaml", "--json")
    result = json.loads(out)
    assert code == 0 and result["budget"].startswith("23.4M tokens a job x 3 arms x 2 seeds")
    four = next(r for r in result["rows"] if r["checkpoint"] == "qwen3-4b-base")
    assert four["ratios"]["h200-0412"] == pytest.approx(1.0, abs=0.01)  # the stored hours gave x0.500
    step_s = Store(sample).read("carrier.carriers")
    step_s = step_s[(step_s["checkpoint"] == "qwen3-4b-base") & (step_s["variant"] == "baseline")]
    newest = step_s.sort_values("finished_at").groupby("host")["step_s"].last()
    for host, value in four["values"].items():
        assert value == pytest.approx(23_400_000 * 6 * newest[host] / 4096 / 3600, rel=1e-9)
    assert not any("num_arms" in w or "token_budget" in w for w in result["warnings"])
    code, _, err = run(capsys, *argv, "--cluster", "no-such.yaml")
    assert code == 2 and "stored hours price each job's own budget" in err
