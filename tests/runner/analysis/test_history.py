"""Drift over past runs: real rows written through Store, the rule recomputed here from its words.

The rule: a host's metric alerts when it moves by more than the threshold against the median of
its earlier runs with the same checkpoint fingerprint and probe config hash, and only when the new
value's spread is at most the trust limit.
"""

from __future__ import annotations

import json
import statistics
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pytest

from runner import cli
from runner.analysis.drift import drift_table
from runner.store.store import JobKey, Store

BASE_STEP_S = {"gx10": 0.40, "ana-ml2": 0.95}
# Earlier nights' multiplicative noise, all well under 3% (and under 3% against any median of them).
NOISE = (0.0, 0.008, -0.006, 0.011, -0.004)
T0 = datetime(2026, 11, 20, 1, 0, tzinfo=timezone.utc)


def write_night(
    store: Store,
    night: int,
    host: str,
    step_s: float,
    *,
    spread_pct: float = 0.8,
    fp: str = "fp-4b",
    config_hash: str = "cfg-a",
    seq_len: int = 4096,
) -> None:
    key = JobKey(
        run_id=f"night-{night}",
        job_id=f"carrier-{host}-{fp}-{config_hash}-{seq_len}",
        probe="carrier",
        host=host,
        checkpoint="qwen3-4b",
        checkpoint_fp=fp,
        config_hash=config_hash,
        code_version="0.1.0",
        finished_at=T0 + timedelta(days=night, minutes=seq_len // 1024),
    )
    store.write_table(
        key,
        "carriers",
        [
            {
                "seq_len": seq_len,
                "step_s": step_s,
                "tok_per_s": seq_len / step_s,
                "spread_pct": spread_pct,
                "steps": 10 if spread_pct <= 2 else 30,
                "trustworthy": spread_pct <= 2,
                "status": "ok",
            }
        ],
    )
    store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})


def noisy_history(root: Path) -> Store:
    store = Store(root)
    for night, noise in enumerate(NOISE):
        for host, base in BASE_STEP_S.items():
            write_night(store, night, host, base * (1 + noise))
    return store


def expected_change_pct(host: str, new_value: float) -> float:
    baseline = statistics.median(BASE_STEP_S[host] * (1 + n) for n in NOISE)
    return (new_value - baseline) / baseline * 100


def newest(drift, host):
    return drift[drift["host"] == host].sort_values("finished_at").iloc[-1]


def test_a_planted_five_percent_slowdown_fires_and_only_there(tmp_path):
    store = noisy_history(tmp_path)
    night = len(NOISE)
    slow = BASE_STEP_S["gx10"] * 1.05
    write_night(store, night, "gx10", slow)
    write_night(store, night, "ana-ml2", BASE_STEP_S["ana-ml2"] * 1.009)
    drift = drift_table(store.read("carrier.carriers"), "step_s")
    alerts = drift[drift["alert"]]
    assert alerts[["host", "run_id"]].values.tolist() == [["gx10", f"night-{night}"]]
    row = newest(drift, "gx10")
    assert row["change_pct"] == pytest.approx(expected_change_pct("gx10", slow))
    assert 4.0 < row["change_pct"] < 6.0 and row["num_previous"] == len(NOISE)
    assert row["baseline"] == pytest.approx(statistics.median(BASE_STEP_S["gx10"] * (1 + n) for n in NOISE))


def test_noise_under_the_threshold_stays_quiet(tmp_path):
    store = noisy_history(tmp_path)
    for host, base in BASE_STEP_S.items():
        write_night(store, len(NOISE), host, base * 1.02)  # 2% on top of noise: under 3%
    drift = drift_table(store.read("carrier.carriers"), "step_s")
    assert not drift["alert"].any()
    for host in BASE_STEP_S:
        assert abs(newest(drift, host)["change_pct"]) < 3.0
    # the same data with a 1% threshold does fire: the quiet above is the threshold's doing
    assert drift_table(store.read("carrier.carriers"), "step_s", threshold_pct=1.0)["alert"].any()


def test_a_slowdown_with_a_wide_spread_is_not_trusted(tmp_path):
    store = noisy_history(tmp_path)
    write_night(store, len(NOISE), "gx10", BASE_STEP_S["gx10"] * 1.05, spread_pct=4.5)
    drift = drift_table(store.read("carrier.carriers"), "step_s", max_spread_pct=2.0)
    row = newest(drift, "gx10")
    assert row["change_pct"] > 4.0 and not row["trusted"] and not row["alert"]
    assert drift_table(store.read("carrier.carriers"), "step_s", max_spread_pct=5.0)["alert"].any()


def test_other_checkpoints_configs_and_lengths_are_never_the_baseline(tmp_path):
    store = noisy_history(tmp_path)
    night = len(NOISE)
    slow = BASE_STEP_S["gx10"] * 1.10
    write_night(store, night, "gx10", slow, fp="fp-4b-retrained")  # new weights: a new series
    write_night(store, night, "gx10", slow, config_hash="cfg-b")  # new probe config: a new series
    write_night(store, night, "gx10", slow, seq_len=8192)  # another length: a new series
    drift = drift_table(store.read("carrier.carriers"), "step_s")
    assert not drift["alert"].any()
    fresh = drift[drift["run_id"] == f"night-{night}"]
    assert len(fresh) == 3 and (fresh["num_previous"] == 0).all() and fresh["baseline"].isna().all()


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["history", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_history_command_table_plot_json_and_exit_code(tmp_path, capsys):
    store = noisy_history(tmp_path / "results")
    write_night(store, len(NOISE), "gx10", BASE_STEP_S["gx10"] * 1.05)
    code, out, _ = run_cli(capsys, "--probe", "carrier", "--store", str(store.root), "--plot", str(tmp_path / "h.png"))
    assert code == 1  # the newest run of a series drifted
    assert out.count("DRIFT") == 1 and "gx10" in out and "up 5." in out
    png = (tmp_path / "h.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    code, out, _ = run_cli(capsys, "--probe", "carrier", "--store", str(store.root), "--host", "ana-ml2", "--json")
    data = json.loads(out)
    assert code == 0 and data["alerts"] == [] and data["metric"] == "step_s"
    assert data["spread_column"] == "spread_pct" and data["by"] == ["seq_len"]
    assert {r["host"] for r in data["rows"]} == {"ana-ml2"} and len(data["rows"]) == len(NOISE)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--probe", "padding"], "no results of probe 'padding'"),
        (["--probe", "carrier", "--metric", "nope"], "no column 'nope'"),
        (["--probe", "carrier", "--host", "h9"], "--host 'h9': none in carrier.carriers"),
        (["--probe", "carrier", "--table", "kernels"], "has no table 'kernels'"),
        (["--probe", "carrier", "--threshold-pct", "-1"], "--threshold-pct"),
    ],
)
def test_history_bad_input_is_one_line_exit_2(tmp_path, capsys, argv, message):
    store = noisy_history(tmp_path)
    code, out, err = run_cli(capsys, *argv, "--store", str(store.root))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1 and out == ""


def test_noisy_nights_are_no_baseline_for_a_steady_one(tmp_path):
    """Three untrusted nights at 0.60 s, then steady ones at 0.40 s: no alert against the noise."""
    store = Store(tmp_path)
    for night in range(3):
        write_night(store, night, "gx10", 0.60 + 0.01 * night, spread_pct=25.0)
    for night in (3, 4):
        write_night(store, night, "gx10", 0.40)
    drift = drift_table(store.read("carrier.carriers"), "step_s")
    assert not drift["alert"].any()
    steady = drift[drift["run_id"].isin(["night-3", "night-4"])].sort_values("finished_at")
    assert steady["num_previous"].tolist() == [0, 1] and steady["baseline"].iloc[1] == pytest.approx(0.40)


def test_a_kernel_fallback_is_the_same_series_slower_not_a_new_one(tmp_path):
    store = noisy_history(tmp_path)
    night = len(NOISE)
    write_night(store, night, "gx10", BASE_STEP_S["gx10"] * 2)
    frame = store.read("carrier.carriers").sort_values("finished_at").reset_index(drop=True)  # the slow night last
    frame["attention_backends"] = ["flash"] * (len(frame) - 1) + ["math"]
    frame["kernel_fallbacks"] = [None] * (len(frame) - 1) + ["chunk_gated_delta_rule (flash-linear-attention)"]
    frame["not_measured"] = [None] * (len(frame) - 1) + ["numerics: oom: CUDA out of memory"]  # an outcome too
    alerts = drift_table(frame, "step_s")
    assert alerts[alerts["alert"]]["run_id"].tolist() == [f"night-{night}"]


def test_variants_stay_separate_series_whatever_by_says(tmp_path):
    store = noisy_history(tmp_path)
    frame = store.read("carrier.carriers")
    frame = pd.concat([frame.assign(variant="baseline"), frame.assign(variant="compile", step_s=frame["step_s"] * 0.6)])
    drift = drift_table(frame, "step_s", by=["seq_len"])
    assert not drift["alert"].any() and "variant" in drift.attrs["by"]
    assert set(drift.groupby(["host", "variant"]).size()) == {len(NOISE)}
