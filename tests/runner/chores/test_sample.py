"""The demo's recorded H200 sample: loaded into a real store, `compare --probe carrier` shows two hosts with
the figures of the raw benchmark files; loading twice adds nothing; no carrier rows is said plainly."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from probes.result import InputError
from runner.analysis.compare import compare
from runner.chores.sample import load_sample
from runner.store.rows import JobKey
from runner.store.store import Store

RESULTS = Path(__file__).resolve().parents[3] / "benchmarks" / "results"


def test_the_recorded_sample_compares_two_hosts_with_the_raw_files_figures(tmp_path):
    store = Store(tmp_path / "store")
    assert load_sample(store) == (10, 0)
    assert load_sample(store) == (0, 10)
    result = compare(store, "carrier", metric="step_s")
    assert result.hosts == ["h200-0312", "h200-0412"]
    row = next(r for r in result.rows if (r["checkpoint"], r["group"]) == ("qwen3-4b-base", "variant=baseline"))[
        "values"
    ]
    # the newest run of each host: run 2 of 2026-12-03 (gpu_carrier.json) and the 4B rerun of 2026-12-04
    first = json.loads((RESULTS / "gpu_carrier.json").read_text())["4096"]["runs"][1]["tables"]["carriers"]
    second = json.loads((RESULTS / "variants3/4b_1x4096_rerun/variants_4b_1x4096.json").read_text())
    assert row["h200-0312"] == pytest.approx(next(r["step_s"] for r in first if r["model"] == "qwen3-4b-base"))
    assert row["h200-0412"] == pytest.approx(second["tables"]["carriers"][0]["step_s"])
    jobs = store.jobs(columns=["run_id", "plan", "code_version", "env_json"])
    assert set(jobs["plan"]) == {"recorded"} and set(jobs["code_version"]) == {"recorded"}
    assert all("benchmarks/results/" in json.loads(e)["recorded"] for e in jobs["env_json"])


def test_compare_with_only_skipped_carrier_jobs_says_so_not_no_column(tmp_path):
    store = Store(tmp_path / "store")
    now = datetime(2026, 12, 4, tzinfo=timezone.utc)
    key = JobKey(
        run_id="r",
        job_id="j",
        probe="carrier",
        host="local",
        checkpoint="qwen3-0.6b-base",
        checkpoint_fp="fp",
        config_hash="c",
        code_version="v",
        finished_at=now,
    )
    store.write_job(key, status="skipped", reason="no GPU", started_at=now, wall_s=0.0, summary={}, config={}, env={})
    with pytest.raises(InputError) as err:
        compare(store, "carrier", metric="step_s")
    assert "no carrier results stored" in str(err.value) and "no column" not in str(err.value)
