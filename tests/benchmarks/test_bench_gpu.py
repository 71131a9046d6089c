"""bench_gpu.py's verdicts on synthetic bench output: both runs judged, the 3% agreement always
emitted for the rows issue 4 names, and FAIL when a row is missing or not GPU-bound."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SPEC = importlib.util.spec_from_file_location(
    "bench_gpu", Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu.py"
)
bench_gpu = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench_gpu)


def row(model, step_s, *, busy=0.97, spread=1.0, status="ok"):
    return {
        "model": model,
        "step_s": step_s,
        "gpu_busy_frac": busy,
        "launch_bound": busy < 0.9,
        "spread_pct": spread,
        "status": status,
    }


def bench(rows):
    return {"tables": {"carriers": rows}}


def good_benches():
    r4k = [row("qwen3-0.6b-base", 0.1, busy=0.6), row("qwen3-1.7b-base", 0.2), row("qwen3-4b-base", 0.5)]
    r16k = [row("qwen3-0.6b-base", 0.4), row("qwen3-1.7b-base", 0.8), row("qwen3-4b-base", 2.0)]
    return {
        "4096": {"runs": [bench(r4k), bench([dict(r) for r in r4k])], "walls_s": [60, 61]},
        "16384": {"runs": [bench(r16k), bench([dict(r) for r in r16k])], "walls_s": [90, 91]},
    }


PROF = {
    "summary": {
        "fitted_lens": [4096, 6144, 8192, 12288],
        "launch_bound_lens": [2048],
        "max_heldout_err_pct": 1.0,
        "kernel_s_per_step": 0.3,
        "step_wall_s": 0.32,
    },
    "tables": {
        "padding_penalty": [
            {"case": "unpadded_same_shape", "step_s": 0.6},
            {"case": "unpadded_same_tokens", "step_s": 0.5},
            {"case": "half_padded", "step_s": 0.6, "penalty_same_shape_pct": 0.0, "penalty_same_tokens_pct": 20.0},
        ]
    },
}


def checks(benches):
    return {name: (ok, detail) for name, ok, detail in bench_gpu.verdicts(benches, PROF, 100.0)}


def test_good_runs_pass_and_the_named_agreements_are_there():
    out = checks(good_benches())
    assert all(ok for ok, _ in out.values()), [n for n, (ok, _) in out.items() if not ok]
    for key, name in (("4096", "qwen3-4b-base"), ("16384", "qwen3-0.6b-base"), ("16384", "qwen3-1.7b-base")):
        assert f"{key}: {name} two runs agree within 3%" in out
    assert "4096: qwen3-4b-base GPU-bound, spread <= 2% (run 2)" in out


def test_a_noisy_second_run_fails_its_own_verdict_and_the_agreement():
    benches = good_benches()
    benches["4096"]["runs"][1]["tables"]["carriers"][2]["spread_pct"] = 4.0
    out = checks(benches)
    assert out["4096: qwen3-4b-base GPU-bound, spread <= 2% (run 1)"][0]
    assert not out["4096: qwen3-4b-base GPU-bound, spread <= 2% (run 2)"][0]
    ok, detail = out["4096: qwen3-4b-base two runs agree within 3%"]
    assert not ok and "not judged" in detail


def test_a_missing_or_launch_bound_named_row_fails_the_agreement():
    benches = good_benches()
    del benches["16384"]["runs"][1]["tables"]["carriers"][0]  # 0.6B missing from run 2
    benches["16384"]["runs"][0]["tables"]["carriers"][1]["launch_bound"] = True  # 1.7B launch-bound in run 1
    out = checks(benches)
    ok, detail = out["16384: qwen3-0.6b-base two runs agree within 3%"]
    assert not ok and "missing" in detail
    assert not out["16384: qwen3-1.7b-base two runs agree within 3%"][0]
    assert not out["16384: qwen3-0.6b-base GPU-bound, spread <= 2% (run 2)"][0]


def test_runs_apart_by_more_than_3_percent_fail():
    benches = good_benches()
    benches["4096"]["runs"][1]["tables"]["carriers"][2]["step_s"] = 0.5 * 1.04
    ok, detail = checks(benches)["4096: qwen3-4b-base two runs agree within 3%"]
    assert not ok and "4.00%" in detail


def test_a_profile_with_three_fitted_points_fails_the_heldout_verdict():
    prof = {**PROF, "summary": {**PROF["summary"], "fitted_lens": [4096, 8192, 12288], "max_heldout_err_pct": None}}
    out = {n: ok for n, ok, _ in bench_gpu.profile_verdicts(prof, 100.0)}
    assert out["profile: >= 3 GPU-bound lengths fitted"] and not out["profile: held-out error <= 5% (>= 4 fitted)"]
