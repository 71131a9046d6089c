"""`labprobe recommend` on real stores: the demo's recorded H200 sample (the verdict line, the two loans of the
4B agreeing), the carrier ruling reproduced from stored profile rows, stacks inside and outside the numerics
tolerance, a priced and replayed batching, and bad input. Expected hours are recomputed here from the stored
step times and the budget, not read from the command's own figures."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from runner import cli
from runner.chores.sample import SAMPLE, load_sample
from runner.store.store import JobKey, Store

REPO = Path(__file__).resolve().parents[3]
T0 = datetime(2026, 12, 5, 22, 0, tzinfo=timezone.utc)
RULING = {"qwen3-0.6b-base": 1.707, "qwen3-1.7b-base": 2.895, "qwen3-4b-base": 5.714}
"""The lab's carrier ruling: seconds a step of 4,096 real tokens."""


@pytest.fixture(scope="module")
def sample_store(tmp_path_factory) -> Path:
    """The demo's recorded sample, loaded once for the module."""
    root = tmp_path_factory.mktemp("sample") / "store"
    load_sample(Store(root))
    return root


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(["recommend", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def cluster_file(tmp_path: Path, budget: dict | None, **extra) -> Path:
    data = {
        "hosts": [{"name": "gx10", "address": "gx10.lab", "gpus": 1}],
        "checkpoints": [{"name": n, "path": n} for n in RULING],
        **extra,
    }
    if budget is not None:
        data["budget"] = budget
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_demo_sample_gets_a_verdict_with_its_evidence(sample_store, capsys):
    code, out, _ = run(capsys, "--store", sample_store, "--cluster", REPO / "cluster.yaml")
    verdict = out.strip().splitlines()[-1]
    assert code == 0 and verdict.startswith("verdict: ")
    # 23.4M tokens x 3 arms x 2 seeds (cluster.yaml), priced by the fastest trustworthy baseline: the 1.7B at
    # 4 x 4,096 tokens a step on the first loan (0.7725 s), the second loan within the spread
    recorded = json.loads(SAMPLE.read_text())["runs"]
    step_s = next(
        r["rows"][0]["step_s"] for r in recorded if r["run"].endswith("-2") and r["checkpoint"] == "qwen3-1.7b-base"
    )
    hours = 23_400_000 * 3 * 2 / (4 * 4096 / step_s) / 3600
    assert f"qwen3-1.7b-base on h200-0312: {hours:.2f} h for the budget" in verdict
    assert "23.4M tokens a job x 3 arms x 2 seeds" in verdict and "stack baseline" in verdict
    assert "h200-0412 the same within the spread" in verdict
    row = next(line for line in out.splitlines() if line.startswith("h200-0312  qwen3-1.7b-base"))
    assert "recorded-20261203T0913Z-2 2026-12-03 09:15" in row and " 0.29 " in row  # run, date, spread
    # launch-bound 0.6B: faster per token, never the verdict, and said
    assert "qwen3-0.6b-base on h200-0312: its figure is not trustworthy" in out


def test_the_two_loans_price_the_4b_baseline_alike_for_the_budget(sample_store, capsys):
    code, out, _ = run(capsys, "--store", sample_store, "--cluster", REPO / "cluster.yaml", "--json")
    found = json.loads(out)
    assert code == 0 and found["budget"]["jobs"] == 6
    hours = {
        p["host"]: p["best"]["hours_budget"] for p in found["priced"] if p["carrier"] == "qwen3-4b-base" and p["best"]
    }
    assert set(hours) == {"h200-0312", "h200-0412"}
    assert hours["h200-0412"] == pytest.approx(hours["h200-0312"], rel=0.10)  # not x0.5: one budget at read time
    newest = {"h200-0312": "recorded-20261203T0913Z-2", "h200-0412": "recorded-20261204T1247Z"}
    for host, run_id in newest.items():
        (job,) = [
            r
            for r in json.loads(SAMPLE.read_text())["runs"]
            if (r["host"], r["run"], r["checkpoint"]) == (host, run_id, "qwen3-4b-base")
        ]
        step_s = next(row["step_s"] for row in job["rows"] if row["variant"] == "baseline")
        assert hours[host] == pytest.approx(23_400_000 * 6 * step_s / 4096 / 3600, rel=1e-9)


def test_a_stack_outside_the_tolerance_is_marked_and_left_out(sample_store, capsys):
    code, out, _ = run(capsys, "--store", sample_store, "--cluster", REPO / "cluster.yaml", "--json")
    priced = {(p["host"], p["carrier"]): p for p in json.loads(out)["priced"]}
    four = priced[("h200-0412", "qwen3-4b-base")]
    # no numerics stored in the sample: the baseline is the figure, compile (faster) beside it, unvouched
    assert four["best"]["stack"] == "baseline" and four["faster_outside"]["stack"] == "compile"
    assert four["faster_outside"]["within_tolerance"] is None
    assert "compile" in four["unverified"] and "fused-adamw" not in four["unverified"]  # slower than the baseline


def put(store: Store, probe: str, ckpt: str, tables: dict, *, summary: dict, config: dict, host="gx10", run=1):
    key = JobKey(
        run_id=f"r{run}",
        job_id=f"{probe}-{host}-{ckpt}",
        probe=probe,
        host=host,
        checkpoint=ckpt,
        checkpoint_fp="fp",
        config_hash=f"c-{probe}",
        code_version="v",
        finished_at=T0 + timedelta(minutes=run),
    )
    for name, rows in tables.items():
        store.write_table(key, name, rows)
    store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary=summary, config=config, env={})


def profile_rows(store: Store, step_s: dict[str, float]) -> None:
    """Profile jobs as the probe stores them: a scaling point at the production length 1 x 4,096."""
    for ckpt, s in step_s.items():
        scaling = [
            {
                "seq_len": n,
                "batch_size": 1,
                "tokens": n,
                "step_s": s * n / 4096,
                "spread_pct": 0.4,
                "launch_bound": False,
            }
            for n in (2048, 4096, 8192)
        ]
        put(
            store,
            "profile",
            ckpt,
            {"scaling": scaling},
            summary={"seq_len": 4096, "step_s": s},
            config={"batch_size": 1},
        )


def test_the_carrier_ruling_from_stored_profile_rows(tmp_path, capsys):
    """2.7 / 4.6 / 9.1 h a voice, ~33 h for the sweep whose three arms are the three models at two seeds."""
    store = tmp_path / "store"
    profile_rows(Store(store), RULING)
    arms = list(RULING)
    cluster = cluster_file(tmp_path, {"tokens_per_job": 23_400_000, "arms": arms, "seeds": 2})
    code, out, _ = run(capsys, "--store", store, "--cluster", cluster, "--json")
    found = json.loads(out)
    voices = {p["carrier"]: p["best"]["hours_per_job"] for p in found["priced"]}
    for ckpt, ruled in zip(arms, (2.7, 4.6, 9.1), strict=True):
        assert voices[ckpt] == pytest.approx(ruled, rel=0.05)
        assert voices[ckpt] == pytest.approx(23_400_000 / 4096 * RULING[ckpt] / 3600, rel=1e-9)
    (sweep,) = found["sweeps"]
    assert sweep["host"] == "gx10" and sweep["hours"] == pytest.approx(33, rel=0.05)
    assert sweep["hours"] == pytest.approx(2 * sum(voices.values()))
    assert found["verdict"].startswith(
        "verdict: qwen3-0.6b-base, qwen3-1.7b-base, qwen3-4b-base (the budget's arms) on gx10: 32.7 h"
    )
    code, text, _ = run(capsys, "--store", store, "--cluster", cluster)
    assert code == 0 and text.strip().splitlines()[-1] == found["verdict"]
    assert "the budget's arms on gx10: 32.7 h (2 seeds x a job each of qwen3-0.6b-base 2.71 h" in text


def test_a_priced_batching_and_a_stack_within_tolerance_price_the_figure_and_a_replay_is_shown(tmp_path, capsys):
    store = Store(tmp_path / "store")
    ckpt = "qwen3-4b-base"
    carriers = [
        {"model": ckpt, "variant": v, "tokens_per_step": 4096, "step_s": s, "spread_pct": 0.5, "trustworthy": True,
         "status": "ok"}
        for v, s in (("baseline", 0.40), ("bf16-adapters+compile+fused-adamw", 0.20), ("float8", 0.10))
    ]  # fmt: skip
    numerics = [
        {"model": ckpt, "variant": "bf16-adapters+compile+fused-adamw", "within_tolerance": True},
        {"model": ckpt, "variant": "float8", "within_tolerance": False},
    ]
    put(store, "carrier", ckpt, {"carriers": carriers, "numerics": numerics}, summary={},
        config={"batch_size": 1, "seq_len": 4096})  # fmt: skip
    goodput = [
        {"strategy": "longest", "goodput_tok_per_s": 5000.0, "new_shapes_s": 90.0},
        {"strategy": "packed", "goodput_tok_per_s": 9000.0, "new_shapes_s": 0.2},
    ]
    put(store, "goodput", ckpt, {"goodput": goodput}, summary={"step_model": "profile fit"},
        config={"lengths": "/data/demo_lengths.csv"}, run=2)  # fmt: skip
    replay = [{"strategy": "packed", "num_steps": 200, "measured_tok_per_s": 17_500.0, "predicted_tok_per_s": 18_000.0,
               "status": "ok"}]  # fmt: skip
    put(store, "replay", ckpt, {"replay": replay}, summary={},
        config={"lengths": "/data/demo_lengths.csv", "variant": "bf16-adapters+compile+fused-adamw"}, run=3)  # fmt: skip
    cluster = cluster_file(tmp_path, {"tokens_per_job": 23_400_000, "arms": 3, "seeds": 2})
    code, out, _ = run(capsys, "--store", store.root, "--cluster", cluster, "--json")
    (priced,) = json.loads(out)["priced"]
    best, outside = priced["best"], priced["faster_outside"]
    # packed at 9,000 real tok/s with the baseline, the stack's step half the baseline's: 18,000
    assert best["stack"] == "bf16-adapters+compile+fused-adamw" and best["real_tok_per_s"] == pytest.approx(18_000)
    assert best["hours_per_job"] == pytest.approx((23_400_000 / 18_000 + 0.2) / 3600)
    assert best["hours_budget"] == pytest.approx(6 * best["hours_per_job"])
    assert best["batching"] == "packed batching on demo_lengths.csv"
    assert [e["probe"] for e in best["evidence"]] == ["goodput", "carrier", "carrier"]
    assert "200 replayed steps: predicted +2.9% of measured (replay run r3" in best["replayed"]
    assert outside["stack"] == "float8" and outside["within_tolerance"] is False
    code, text, _ = run(capsys, "--store", store.root, "--cluster", cluster)
    assert "OUTSIDE tolerance" in text and "replayed: qwen3-4b-base on gx10" in text
    assert "stack bf16-adapters+compile+fused-adamw (numerics within tolerance), packed batching" in text
    assert "batching not priced" not in text


@pytest.mark.parametrize(
    ("argv", "budget", "says"),
    [
        (["--cluster", "missing.yaml"], None, "--cluster missing.yaml: no such file"),
        ([], None, "no `budget`"),
        (["--host", "nowhere"], {"tokens_per_job": 1000}, "--host 'nowhere': not in cluster.yaml"),
        (["--checkpoint", "qwen9"], {"tokens_per_job": 1000}, "--checkpoint 'qwen9'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, argv, budget, says):
    monkeypatch.chdir(tmp_path)
    profile_rows(Store(tmp_path / "store"), {"qwen3-4b-base": 5.714})
    cluster = cluster_file(tmp_path, budget)
    code, out, err = run(capsys, *(argv if argv[:1] == ["--cluster"] else ["--cluster", cluster, *argv]), "--store",
                         tmp_path / "store")  # fmt: skip
    assert code == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_work_a_plan_would_measure_is_named_with_its_plan(tmp_path, capsys):
    store = tmp_path / "store"
    profile_rows(Store(store), {"qwen3-4b-base": 5.714})
    plans = {"nightly": [{"probe": "profile", "hosts": ["gx10"]}, {"probe": "mask", "hosts": ["gx10"]}]}
    cluster = cluster_file(tmp_path, {"tokens_per_job": 1000}, plans=plans)
    code, out, _ = run(capsys, "--store", store, "--cluster", cluster)
    assert "  - no profile of qwen3-0.6b-base, qwen3-1.7b-base on gx10: run `labprobe sweep --plan nightly`" in out
    assert "no mask" not in out  # a probe that measures no rate is no gap
    code, out, _ = run(capsys, "--store", store, "--cluster", cluster, "--checkpoint", "qwen3-4b-base")
    assert code == 0 and "no profile of" not in out


def test_every_hours_figure_a_probe_prints_names_the_budget_it_prices(tmp_path):
    """A stored hours figure prices its own job's budget: the probe's output says which (carrier's summary; goodput's
    answer, as the sweep's end and the report show it), so two of them are never read as one."""
    import probes

    lengths = tmp_path / "lengths.csv"
    lengths.write_text("length\n" + "\n".join(["4096"] * 8) + "\n")
    budget = dict(token_budget=23_400_000, num_arms=3, num_seeds=2)
    priced = probes.run("goodput", lengths=lengths, batch_size=1, quadratic_s=0.0, linear_s=0.0, fixed_s=1.0, **budget)
    (row,), _ = probes.answer("goodput").figures({}, priced.summary, {})
    assert row["hours_priced_for"] == "23.4M tokens a job x 3 arms x 2 seeds" and "best_hours_sweep" in row
    counted = probes.run("carrier", checkpoint=(REPO / "demo/checkpoints/qwen3-0.6b-base",), steps=0, **budget)
    assert counted.summary["hours_priced_for"].startswith("23,400,000 tokens a job x 3 arms x 2 seeds; stack: each")
