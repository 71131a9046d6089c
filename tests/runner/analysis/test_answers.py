"""What each probe answered, per host x checkpoint: checked against the stored rows, recomputed here.

The store holds real probe results (mask on the demo Qwen3 config with a packed batch, padding and
bucket over lengths files) written through Store.write_result, and carrier and profile rows in the
probes' own columns (GPU probes: no GPU in CI). Two hosts, two runs: in the second, ana-ml2's carrier
job failed (its node died) and its profile job was skipped, and the corpus behind padding and bucket
changed, so the answers must show ana-ml2's earlier values marked as such and the changed figures.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from probes.bucket import probe as bucket
from probes.mask import probe as mask
from probes.mask.answer import layer_ranges
from probes.padding import probe as padding
from runner.analysis.answers import answers, answers_text, table_rows, to_json
from runner.store.store import JobKey, Store

REPO = Path(__file__).resolve().parents[3]
QWEN = REPO / "demo" / "checkpoints" / "qwen3-0.6b-base"
HOSTS = ("gx10", "ana-ml2")
CKPT = "qwen3-0.6b-base"
T0 = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
TOK_PER_S = {("gx10", 0): 20_000.0, ("ana-ml2", 0): 16_000.0, ("gx10", 1): 21_000.0}
ADVICE = ["qwen3-0.6b-base bf16_autocast: 20,000 -> 26,000 tok/s (x1.300), peak 9.0 GiB -> 7.5 GiB; none"]


def key(run: int, probe: str, host: str) -> JobKey:
    return JobKey(
        run_id=f"r{run}",
        job_id=f"{probe}-{host}",
        probe=probe,
        host=host,
        checkpoint=CKPT,
        checkpoint_fp="fp-qwen",
        config_hash=f"cfg-{probe}",
        code_version="v",
        finished_at=T0 + timedelta(days=run, minutes=len(probe) + HOSTS.index(host)),
    )


def lengths_file(folder: Path, num: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    path = folder / f"lengths-{seed}.csv"
    pd.DataFrame({"length": rng.integers(10, 1200, num), "source": rng.choice(["qa", "code", "chat"], num)}).to_csv(
        path, index=False
    )
    return path


def put_carrier(store: Store, run: int, host: str) -> None:
    k = key(run, "carrier", host)
    tok = TOK_PER_S[(host, run)]
    rows = [
        {
            "model": CKPT,
            "variant": variant,
            "params_total": 616_000_000,
            "tokens_per_step": 4096,
            "step_s": 4096 / (tok * speed),
            "tok_per_s": tok * speed,
            "spread_pct": spread,
            "trustworthy": spread <= 2.0,
            "launch_bound": spread > 2.0,
            "status": "ok",
        }
        for variant, speed, spread in (("baseline", 1.0, 0.8), ("bf16_autocast", 1.3, 6.5))
    ]
    store.write_table(k, "carriers", rows)
    store.write_job(
        k, status="ok", started_at=k.finished_at, wall_s=30.0, summary={"advice": ADVICE}, config={}, env={}
    )


def put_profile(store: Store, run: int, host: str) -> None:
    k = key(run, "profile", host)
    step_s = 0.2 if host == "gx10" else 0.3
    shares = {"quadratic": 12.0, "linear": 70.0, "fixed": 18.0}
    store.write_table(
        k,
        "fit",
        [{"term": t, "coef": step_s * s / 100, "unit": "s", "share_at_production_pct": s} for t, s in shares.items()],
    )
    store.write_job(
        k,
        status="ok",
        started_at=k.finished_at,
        wall_s=60.0,
        config={},
        env={},
        summary={
            "seq_len": 4096,
            "step_s": step_s,
            "max_heldout_err_pct": 1.5,
            "padding_penalty_same_shape_pct": 20.0,
            "padding_penalty_same_tokens_pct": 35.0,
            "launch_bound_lens": [1024],
        },
    )


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Store:
    folder = tmp_path_factory.mktemp("answers")
    store = Store(folder / "results")
    packed = mask.run(mask.Config(checkpoint=QWEN, seq_len=64, padding="packed"))
    corpora = [lengths_file(folder, 300, seed=0), lengths_file(folder, 300, seed=1)]
    for run in (0, 1):
        pad = padding.run(padding.Config(lengths=corpora[run], max_length=1024, vocab_size=151936))
        buck = bucket.run(bucket.Config(lengths=corpora[run], max_length=1024))
        for host in HOSTS:
            for result in (packed, pad, buck):
                k = key(run, result.probe, host)
                store.write_result(k, result, started_at=k.finished_at, wall_s=1.0, env={})
            if run == 1 and host == "ana-ml2":
                k = key(run, "carrier", host)
                store.write_job(
                    k,
                    status="failed",
                    reason="NodeDiedError: the node running it died",
                    started_at=k.finished_at,
                    wall_s=5.0,
                    summary={},
                    config={},
                    env={},
                )
                k = key(run, "profile", host)
                store.write_job(
                    k,
                    status="skipped",
                    reason="deadline",
                    started_at=k.finished_at,
                    wall_s=0.0,
                    summary={},
                    config={},
                    env={},
                )
            else:
                put_carrier(store, run, host)
                put_profile(store, run, host)
    return store


def work(probes=("mask", "padding", "bucket", "carrier", "profile"), hosts=HOSTS):
    return [(p, h, CKPT, f"cfg-{p}") for p in probes for h in hosts]


def by_probe(sections):
    return {s.probe: s for s in sections}


def job_rows(store: Store, table: str, run: int, host: str) -> pd.DataFrame:
    rows = store.read(table)
    return rows[(rows["run_id"] == f"r{run}") & (rows["host"] == host)]


def test_mask_answer_is_the_stored_layers(lab):
    section = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))["mask"]
    for answer in section.answers:
        layers = job_rows(lab, "mask.layers", 1, answer.host)
        full = layers[layers["window"].isna()]
        [row] = answer.figures
        assert row["layers"] == len(layers)
        lost = full["mask"] != "none"  # the fast path is the maskless is_causal call
        assert row["full_fast_path"] == f"{int((~lost).sum())} of {len(full)}"
        assert row["lose_fast_path"] == layer_ranges(full.loc[lost, "layer"].tolist())
        assert row["cross_sequence"] == layer_ranges(layers.loc[layers["cross_sequence"], "layer"].tolist())
        job = lab.jobs().query("run_id == 'r1' and probe == 'mask' and host == @answer.host").iloc[0]
        failed = job["reason"].removeprefix("checks failed: ")
        assert row["checks"] == f"failed: {failed}" and "no_cross_sequence" in failed
        assert row["padding"] == json.loads(job["config_json"])["padding"] == "packed"
    assert section.baseline is None  # masks are analyses of a config, not measurements of a host


def test_padding_and_bucket_answers_are_the_stored_rows(lab):
    sections = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))
    for answer in sections["padding"].answers:
        strategies = job_rows(lab, "padding.strategies", 1, answer.host)
        [row] = answer.figures
        for s in strategies.itertuples():
            assert row[f"{s.strategy}_pad_pct"] == pytest.approx(100 * s.pad_fraction)
        assert row["truncated_samples"] == strategies["truncated_samples"].iloc[0]
        assert row["max_length"] == 1024
    for answer in sections["bucket"].answers:
        sweep = job_rows(lab, "bucket.sweep", 1, answer.host).sort_values("bucket_size")
        job = lab.jobs().query("run_id == 'r1' and probe == 'bucket' and host == @answer.host").iloc[0]
        size = json.loads(job["summary_json"])["bucket_size_90pct_gain"]
        pick = sweep[sweep["bucket_size"] == size].iloc[0]
        [row] = answer.figures
        assert row["bucket_size_90pct_gain"] == size
        assert row["pad_pct"] == pytest.approx(100 * pick["pad_fraction"])
        assert row["sources_per_batch"] == pytest.approx(pick["sources_per_batch"])
        assert row["random_sources_per_batch"] == pytest.approx(sweep["sources_per_batch"].iloc[0])
        assert row["global_sort_pad_pct"] == pytest.approx(100 * sweep["pad_fraction"].iloc[-1])


def test_a_changed_corpus_shows_as_changed_figures(lab):
    sections = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))
    before = job_rows(lab, "padding.strategies", 0, "gx10").set_index("strategy")["pad_fraction"]
    after = job_rows(lab, "padding.strategies", 1, "gx10").set_index("strategy")["pad_fraction"]
    [change] = next(a for a in sections["padding"].answers if a.host == "gx10").changes
    assert change.startswith("since run r0: ")
    for strategy in after.index:
        if after[strategy] != before[strategy]:
            assert f"{strategy}_pad_pct {100 * before[strategy]:.4g} -> {100 * after[strategy]:.4g}" in change
    assert all(a.changes == [] for a in sections["mask"].answers)  # the same config: the same answer
    assert all(a.changes == [] for a in sections["carrier"].answers)  # timings are drift's business


def test_a_failed_rerun_shows_the_earlier_ok_value_marked(lab):
    """Issue 12 item 16: ana-ml2's carrier failed this run; its earlier good values stay on screen."""
    sections = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))
    carrier = {a.host: a for a in sections["carrier"].answers}
    earlier = carrier["ana-ml2"]
    assert (earlier.outcome, earlier.run_id, earlier.earlier) == ("failed", "r0", True)
    stored = job_rows(lab, "carrier.carriers", 0, "ana-ml2").set_index("variant")
    assert {r["variant"]: r["tok_per_s"] for r in earlier.figures} == stored["tok_per_s"].to_dict()
    assert "this run failed: NodeDiedError" in earlier.notes[0]
    assert (carrier["gx10"].run_id, carrier["gx10"].earlier) == ("r1", False)
    profile = {a.host: a for a in sections["profile"].answers}
    assert (profile["ana-ml2"].outcome, profile["ana-ml2"].run_id) == ("skipped", "r0")
    text = answers_text(lab, "r1", work=work(), host_order=list(HOSTS))
    assert "earlier: run r0" in text and "this run failed: NodeDiedError" in text


def test_carrier_rows_trust_advice_and_ratios(lab):
    section = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))["carrier"]
    assert (section.baseline, section.ratio_of) == ("gx10", "tok_per_s")
    base = job_rows(lab, "carrier.carriers", 1, "gx10").set_index("variant")
    other = job_rows(lab, "carrier.carriers", 0, "ana-ml2").set_index("variant")  # ana-ml2's latest ok
    for answer in section.answers:
        stored = base if answer.host == "gx10" else other
        for row in answer.figures:
            own = stored.loc[row["variant"]]
            assert row["tok_per_s"] == pytest.approx(own["tok_per_s"])
            assert row["ratio_to_gx10"] == pytest.approx(own["tok_per_s"] / base.loc[row["variant"], "tok_per_s"])
            assert row["trust"].startswith("yes" if own["trustworthy"] else "no")
        assert any(ADVICE[0] in n for n in answer.notes)
    rows = table_rows(section)
    assert [(r["host"], r["variant"]) for r in rows] == [(h, v) for h in HOSTS for v in ("baseline", "bf16_autocast")]


def test_profile_terms_and_padding_penalty(lab):
    section = by_probe(answers(lab, "r1", work=work(), host_order=list(HOSTS)))["profile"]
    gx10 = next(a for a in section.answers if a.host == "gx10")
    fit = job_rows(lab, "profile.fit", 1, "gx10").set_index("term")["share_at_production_pct"]
    [row] = gx10.figures
    assert {t: row[f"{t}_pct"] for t in fit.index} == fit.to_dict()
    summary = json.loads(
        lab.jobs().query("run_id == 'r1' and probe == 'profile' and host == 'gx10'").iloc[0]["summary_json"]
    )
    assert row["penalty_same_shape_pct"] == summary["padding_penalty_same_shape_pct"]
    assert row["ratio_to_gx10"] == 1.0
    ana = next(a for a in section.answers if a.host == "ana-ml2")
    assert ana.figures[0]["ratio_to_gx10"] == pytest.approx(0.3 / 0.2)


def test_one_host_gets_no_ratios_and_never_done_work_says_why(lab):
    sections = answers(lab, "r1", work=work(hosts=("gx10",)) + [("carrier", "nowhere", CKPT, "cfg-carrier")])
    assert all(s.baseline is None for s in sections)
    text = answers_text(lab, "r1", work=work(hosts=("gx10",)))
    assert "ratio_to" not in text
    assert "never done ok: qwen3-0.6b-base @ nowhere" in answers_text(
        lab, "r1", work=[("carrier", "nowhere", CKPT, "c")]
    )
    assert json.loads(json.dumps(to_json(sections)))[0]["probe"] == "mask"
    # Every value from one earlier run (ana-ml2's carrier failed this run): said once, in the title.
    only = answers_text(lab, "r1", work=work(probes=("carrier",), hosts=("ana-ml2",)))
    assert "(all from run r0, stored before this run" in only and "measured" not in only
    assert "this run failed: NodeDiedError" in only


def test_layer_ranges():
    assert layer_ranges([5, 0, 1, 2, 11, 12]) == "0-2, 5, 11-12"
    assert layer_ranges([]) == "none"
