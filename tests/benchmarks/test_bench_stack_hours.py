"""bench_stack_hours_gpu.py's commands and verdict on synthetic output: carrier, both replays and goodput share
the model and step options, the stacked replay predicts from the baseline's fit scaled by the carrier's run,
and the verdict fails on any strategy beyond 5% or none replayed. (`--tiny` runs the four commands for real
on the CPU: about 2 minutes, so not here.)"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "bench_stack_hours_gpu", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_stack_hours_gpu.py"
)
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def _args(**kw) -> argparse.Namespace:
    base = dict(
        checkpoint=Path("ck/qwen3-4b-base"),
        harness="benchmarks.harness_plain",
        tiny=False,
        max_length=2048,
        stack=None,
        search_budget_s=900.0,
        num_steps=200,
        batch_size=6,
        rows="packed",
    )
    return argparse.Namespace(**(base | kw))


def test_the_commands_share_the_step_and_the_stacked_replay_is_priced_as_goodput_prices():
    args = _args()
    carrier = bench.carrier_argv(args)
    assert carrier[:2] == ["probe", "carrier"] and "--search" in carrier and "--seq-len" in carrier
    assert carrier[carrier.index("--rows") + 1] == "packed"  # masked rows, as the packed batches priced
    assert bench.carrier_argv(_args(stack="compile+fused-adamw"))[-2:] == ["--variant", "compile+fused-adamw"]
    shared = bench.common(args)
    stacked = bench.replay_argv(args, "--variant", "S", "--profile", "b.json", "--stack-json", "c.json")
    assert carrier[2 : 2 + len(shared)] == shared and stacked[2 : 2 + len(shared)] == shared
    priced = bench.goodput_argv(args, Path("b.json"), Path("c.json"))
    assert priced[priced.index("--profile") + 1] == "b.json" and priced[priced.index("--stack-json") + 1] == "c.json"
    assert "23400000" in priced and "--stack" not in priced
    # one batch size everywhere: the carrier's factor, the fit and the price are of the same batches
    three = _args(batch_size=3)
    for argv, rows in (
        (carrier, "6"),
        (stacked, "6"),
        (priced, "6"),
        (bench.carrier_argv(three), "3"),
        (bench.replay_argv(three), "3"),
        (bench.goodput_argv(three, Path("b"), Path("c")), "3"),
    ):
        assert argv[argv.index("--batch-size") + 1] == rows  # fmt: skip


def test_the_verdict_needs_every_replayed_strategy_within_5_percent():
    summary = {"priced_with": "packed batching, stack s", "best_strategy": "packed", "stack": "s"}
    priced = {"summary": summary | {"stack_step_factor": 0.5}, "checks": [{"name": "stack_trustworthy", "ok": True}]}
    replay = {
        "summary": {"stack_step_factor": 0.5},
        "tables": {"replay": [{"strategy": "sorted", "error_pct": -3.0}, {"strategy": "bucket", "error_pct": 4.9}]},
    }
    assert not bench.verdict(priced, replay)["ok"]  # goodput's best, packed, was not replayed
    replay["tables"]["replay"].append({"strategy": "packed", "error_pct": -1.0})
    good = bench.verdict(priced, replay)
    assert good["ok"] and good["replayed"] == ["sorted", "bucket", "packed"] and good["best_strategy_replayed"]
    replay["tables"]["replay"][1]["error_pct"] = 5.2
    assert not bench.verdict(priced, replay)["ok"]
    assert not bench.verdict(priced, {"tables": {}})["ok"]


def test_the_verdict_needs_the_price_it_checked_to_rest_on_trusted_rows():
    """Every error within 5% is no verdict on hours priced from a launch-bound or another model's stack, nor
    when the replay scaled by another factor than goodput's; a failed numerics check is said, not hidden."""
    replay = {
        "summary": {"stack_step_factor": 0.5},
        "tables": {"replay": [{"strategy": "packed", "error_pct": 1.0}]},
        "checks": [{"name": "compiled_graphs_within_limit", "ok": True}],
    }
    summary = {"best_strategy": "packed", "stack_step_factor": 0.5, "stack_within_tolerance": False}
    numerics = {"name": "stack_numerics_within_tolerance", "ok": False}
    good = bench.verdict({"summary": summary, "checks": [numerics]}, replay)
    assert good["ok"] and good["failed_checks"] == ["goodput: stack_numerics_within_tolerance"]
    assert good["stack_within_tolerance"] is False
    for name in ("stack_trustworthy", "stack_of_the_fits_model", "stack_of_the_fits_step"):
        priced = {"summary": summary, "checks": [{"name": name, "ok": False}]}
        assert not bench.verdict(priced, replay)["ok"], name
    other = {**replay, "summary": {"stack_step_factor": 0.6}}
    assert not bench.verdict({"summary": summary, "checks": []}, other)["ok"]


def test_labprobe_runs_with_the_checkout_first_and_the_callers_path_after_it(tmp_path, monkeypatch):
    """On the device the carried wheels (pydantic among them) are on the caller's PYTHONPATH: a labprobe
    process given the checkout alone failed at its first import."""
    seen = {}

    def run(command, cwd, env, stdout, text):
        seen["path"] = env["PYTHONPATH"]  # stderr not captured (no such argument): it reaches the call's log live
        return argparse.Namespace(returncode=0, stdout='{"summary": {}}', stderr="")

    monkeypatch.setattr(bench.subprocess, "run", run)
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    assert bench.labprobe(["probe", "carrier"], tmp_path / "c.json", tmp_path / "log.sh") == {"summary": {}}
    assert seen["path"].split(":") == [str(bench.ROOT), "/tmp/site"]
    monkeypatch.delenv("PYTHONPATH")
    bench.labprobe(["probe", "carrier"], tmp_path / "c.json", tmp_path / "log.sh")
    assert seen["path"] == str(bench.ROOT)


@pytest.mark.parametrize(
    "phase, probes",
    [("first", ["carrier", "replay"]), ("carrier", ["carrier"]), ("baseline", ["replay"]),
     ("rest", ["goodput", "replay"])],
)  # fmt: skip
def test_each_phase_runs_its_commands_and_first_is_carrier_and_baseline(phase, probes, tmp_path, monkeypatch):
    """A call holds at most 600 s: `first` gives an H100 at 3 x 2,048 the carrier and the baseline's replay in
    one call, `rest` the price and the stacked replay in the next."""
    ran = []

    def labprobe(argv, out_file, log):
        ran.append(argv[1])
        return {"summary": {"stack": "s", "best_strategy": "packed"}, "tables": {"replay": []}, "checks": []}

    monkeypatch.setattr(bench, "labprobe", labprobe)
    monkeypatch.setattr(sys, "argv", ["bench", "--out", str(tmp_path), "--phase", phase, "--stack", "s"])
    bench.main()
    assert ran == probes


def test_a_later_phase_reads_the_earlier_calls_files_from_elsewhere_and_returns_only_its_own(tmp_path, monkeypatch):
    """A device call returns at most 8 files: `rest` reads call 1's carrier.json and replay_baseline.json from
    --from (.gpu-hours) and writes into --out only what it made."""
    earlier, out, read = tmp_path / "earlier", tmp_path / "out", []
    earlier.mkdir()

    def labprobe(argv, out_file, log):
        read.extend(a for a in argv if a.endswith(".json"))
        out_file.write_text("{}")
        return {"summary": {"stack": "s", "best_strategy": "packed"}, "tables": {"replay": []}, "checks": []}

    monkeypatch.setattr(bench, "labprobe", labprobe)
    argv = ["bench", "--out", str(out), "--from", str(earlier), "--phase", "rest", "--stack", "s"]
    monkeypatch.setattr(sys, "argv", argv)
    bench.main()
    assert set(read) == {str(earlier / "carrier.json"), str(earlier / "replay_baseline.json")}
    assert sorted(p.name for p in out.iterdir()) == [
        "goodput_stack.json",
        "replay_stack.json",
        "stack_hours_summary.json",
    ]
