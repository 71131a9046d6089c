"""Variants in the store: compare and history show them side by side and never mix them; compare
--variant picks them; a harness change is warned as such, never read as a host's drift."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from probes.result import InputError
from runner import cli
from runner.analysis.compare import compare
from runner.analysis.drift import drift_table
from runner.store.store import JobKey, Store

T0 = datetime(2026, 12, 1, 22, 0, tzinfo=timezone.utc)
ENV = {
    "python": "3.11.9",
    "torch": "2.13.0",
    "transformers": "5.24.0",
    "peft": "0.21.0",
    "cuda": "12.8",
    "driver": "570.1",
    "gpu": "NVIDIA H200",
    "harness": "probes.step.harness",
    "harness_sha256": "aaaa",
}


def put(store: Store, *, host: str, run: int, tok_per_s: dict[str, float], env: dict | None = None) -> None:
    key = JobKey(
        run_id=f"r{run}",
        job_id=f"{host}-q4b",
        probe="carrier",
        host=host,
        checkpoint="q4b",
        checkpoint_fp="fp",
        config_hash="c1",
        code_version="v",
        finished_at=T0 + timedelta(hours=run),
    )
    store.write_table(
        key,
        "carriers",
        [
            {"model": "q4b", "variant": v, "tok_per_s": t, "spread_pct": 0.5, "caveat": f"caveat of {v}"}
            for v, t in tok_per_s.items()
        ],
    )
    store.write_job(
        key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env=env or ENV, plan="nightly"
    )


def test_variants_are_separate_rows_even_when_hosts_measured_different_sets(tmp_path):
    store = Store(tmp_path)
    put(store, host="gx10", run=1, tok_per_s={"baseline": 100.0, "compile": 160.0})
    put(store, host="ana-ml2", run=1, tok_per_s={"baseline": 50.0})  # no compile row on this host
    rows = {r["group"]: r for r in compare(store, "carrier", host_order=["gx10", "ana-ml2"]).rows}
    assert set(rows) == {"variant=baseline", "variant=compile"}
    assert rows["variant=baseline"]["values"] == {"gx10": 100.0, "ana-ml2": 50.0}
    assert rows["variant=compile"]["values"] == {"gx10": 160.0}  # never averaged with a baseline
    only = compare(store, "carrier", variants=["compile"])
    assert [r["group"] for r in only.rows] == ["variant=compile"]
    put(store, host="gx10", run=2, tok_per_s={"compile+fused-adamw": 170.0, "ce-chunk=512": 101.0})
    asked = compare(store, "carrier", variants=["fused-adamw + compile", "ce-chunk=0512"])  # spelled as the lab may
    assert sorted(r["group"] for r in asked.rows) == ["variant=ce-chunk=512", "variant=compile+fused-adamw"]
    put(store, host="ana-ml2", run=3, tok_per_s={"ce-chunk=0256": 99.0})  # stored before names were canonical
    put(store, host="gx10", run=4, tok_per_s={"ce-chunk=256": 98.0})  # the same chunk, stored as named now
    for asked in ("ce-chunk=0256", "ce-chunk=256"):  # one series under the name the store keeps now
        assert [r["group"] for r in compare(store, "carrier", variants=[asked]).rows] == ["variant=ce-chunk=256"]
    assert "variant=ce-chunk=0256" not in {r["group"] for r in compare(store, "carrier").rows}


def test_an_unknown_variant_is_bad_input_naming_the_stored_ones(tmp_path, capsys):
    store = Store(tmp_path)
    put(store, host="gx10", run=1, tok_per_s={"baseline": 100.0, "bf16-adapters": 130.0})
    with pytest.raises(InputError, match=r"--variant 'turbo'.*stored: baseline, bf16-adapters"):
        compare(store, "carrier", variants=["turbo"])
    code = cli.main(["compare", "--probe", "carrier", "--store", str(tmp_path), "--variant", "turbo"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "turbo" in err
    assert (
        cli.main(
            [
                "compare",
                "--probe",
                "carrier",
                "--store",
                str(tmp_path),
                "--variant",
                "bf16-adapters",
                "--variant",
                "baseline",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "variant=bf16-adapters" in out and "variant=baseline" in out


def test_history_never_mixes_variants(tmp_path):
    store = Store(tmp_path)
    for run, compiled in ((1, 160.0), (2, 161.0), (3, 100.0)):
        put(store, host="gx10", run=run, tok_per_s={"baseline": 100.0, "compile": compiled})
    frame = store.read("carrier.carriers")
    drift = drift_table(frame, "tok_per_s", by=[])  # even with no identity columns asked for
    last = drift[drift["run_id"] == "r3"].set_index("variant")
    assert last.loc["baseline", "change_pct"] == pytest.approx(0.0)
    assert last.loc["compile", "baseline"] == pytest.approx(160.5) and bool(last.loc["compile", "alert"])


def test_a_harness_change_is_warned_as_one(tmp_path):
    store = Store(tmp_path)
    put(store, host="gx10", run=1, tok_per_s={"baseline": 100.0})
    put(store, host="ana-ml2", run=1, tok_per_s={"baseline": 90.0}, env={**ENV, "harness_sha256": "bbbb"})
    warnings = compare(store, "carrier").warnings
    [harness] = [w for w in warnings if w.startswith("harness sources")]
    assert "a harness change, not host drift" in harness and "gx10 aaaa" in harness and "ana-ml2 bbbb" in harness
    put(
        store,
        host="ana-ml2",
        run=2,
        tok_per_s={"baseline": 90.0},
        env={k: v for k, v in ENV.items() if not k.startswith(("harness", "peft"))},
    )
    assert not any(w.startswith(("harness", "peft")) for w in compare(store, "carrier").warnings)


def test_the_report_lists_each_jobs_advice_per_host(tmp_path):
    from runner.analysis.report import write_report

    store = Store(tmp_path)
    advice = {
        "gx10": [
            "q4b compile: 100 -> 160 tok/s (x1.600), peak 40.0 GiB -> 32.0 GiB; compile time ...",
            "q4b grad-ckpt: 100 -> 66 tok/s (x0.660), peak 40.0 GiB -> 11.0 GiB; memory for time",
        ],
        "ana-ml2": ["q4b bf16-adapters: 50 -> 60 tok/s (x1.200), peak n/a -> n/a; optimizer precision"],
    }
    for host, lines in advice.items():
        key = JobKey(
            run_id="r1",
            job_id=f"{host}-q4b",
            probe="carrier",
            host=host,
            checkpoint="q4b",
            checkpoint_fp="fp",
            config_hash="c1",
            code_version="v",
            finished_at=T0,
        )
        store.write_table(
            key, "carriers", [{"model": "q4b", "variant": "baseline", "tok_per_s": 100.0, "spread_pct": 0.5}]
        )
        store.write_job(
            key, status="ok", started_at=T0, wall_s=1.0, summary={"advice": lines}, config={}, env=ENV, plan="nightly"
        )
    path, _ = write_report(store, "r1")
    page = path.read_text()
    section = page[page.index("<h2>Advice") :]
    assert section.index("ana-ml2 · carrier q4b") < section.index("gx10 · carrier q4b")
    for lines in advice.values():
        assert all(line.replace(">", "&gt;") in section for line in lines)


def test_stored_variant_names_of_other_types_neither_crash_nor_match_a_name():
    from runner.analysis.compare import of_variants

    rows = pd.DataFrame(
        {"variant": ["compile+fused-adamw", 512, None, "fused-adamw+compile"], "tok_per_s": [1, 2, 3, 4]}
    )
    kept = of_variants(rows, "carrier", "carriers", ["fused-adamw + compile"])
    assert kept["tok_per_s"].tolist() == [1, 4] and set(kept["variant"]) == {"compile+fused-adamw"}
