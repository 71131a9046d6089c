"""What the morning report leads with, on the demo's recorded H200 sample plus a night with a GPU job that
waited for its card: `labprobe recommend`'s verdict first (the same line, text and HTML), how long each GPU
job waited and why, the carrier rows with the variant and the host first and their hours for the lab's
budget (not each job's own)."""

from __future__ import annotations

import html
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from runner import cli
from runner.chores.sample import load_sample
from runner.store.store import JobKey, Store

REPO = Path(__file__).resolve().parents[3]
RUN = "20261206T220000Z-wait"
WHY = "its card busy for 42 s (pid 4242 held 21.0 GiB at 100%)"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """The sample, and a night whose one GPU job waited 42 s for a foreign process to leave its card."""
    root = tmp_path_factory.mktemp("lab") / "store"
    store = Store(root)
    load_sample(store)
    when = datetime(2026, 12, 6, 22, 5, tzinfo=timezone.utc)
    key = JobKey(
        run_id=RUN,
        job_id="carrier-gx10",
        probe="carrier",
        host="gx10",
        checkpoint="qwen3-4b-base",
        checkpoint_fp="fp",
        config_hash="c",
        code_version="v",
        finished_at=when,
    )
    row = {"model": "qwen3-4b-base", "variant": "baseline", "tokens_per_step": 4096, "step_s": 0.8, "spread_pct": 0.5}
    store.write_table(key, "carriers", [{**row, "trustworthy": True, "status": "ok", "hours_per_job": 271.0}])
    env = {"gpu_wait_s": "42.0", "gpu_wait_reason": WHY, "gpu_index": "0", "gpu_uuid": "GPU-abc"}
    store.write_job(key, status="ok", started_at=when, wall_s=60.0, summary={}, config={"batch_size": 1}, env=env)
    return root


def run(capsys, *argv) -> str:
    assert cli.main([str(a) for a in argv]) == 0
    return capsys.readouterr().out


def test_the_report_leads_with_the_verdict_and_says_each_gpu_jobs_wait(lab, capsys):
    cluster = REPO / "cluster.yaml"
    verdict = run(capsys, "recommend", "--store", lab, "--cluster", cluster).strip().splitlines()[-1]
    text = run(capsys, "report", "--run", RUN, "--store", lab, "--cluster", cluster)
    assert text.splitlines()[0] == verdict and verdict.startswith("verdict: ")
    assert f"  GPU job ok: carrier qwen3-4b-base @ gx10 on GPU 0 (GPU-abc): waited 42 s: {WHY}" in text
    page = (lab / "reports" / f"{RUN}.html").read_text()
    lead = page.index("The lab's question")
    assert (
        lead < page.index(html.escape(verdict)) < page.index("What this run found") < page.index("GPU jobs: the card")
    )
    waits = page[page.index("GPU jobs: the card") :]
    assert re.search(r"<td class=\"nw\">GPU 0 \(GPU-abc\)</td><td class=\"num\">42</td>", waits)
    assert html.escape(WHY) in waits


def test_carrier_rows_put_variant_and_host_first_and_price_the_labs_budget(lab, capsys):
    run(capsys, "report", "--run", RUN, "--store", lab, "--cluster", REPO / "cluster.yaml")
    page = (lab / "reports" / f"{RUN}.html").read_text()
    section = page[page.index("Carriers: per-host comparison") :]
    first = re.search(r"<thead><tr>(.*?)</tr></thead>", section).group(1)
    heads = re.findall(r"<th>(.*?)</th>", first)
    assert [h.replace("_<wbr>", "_") for h in heads[:2]] == ["variant", "host"]
    assert "Hours for the lab's budget, 23.4M tokens a job x 3 arms x 2 seeds" in section
    hours = 23_400_000 * 0.8 / 4096 / 3600  # the stored 271 h priced a hand default of 1e9 tokens
    assert f">{hours:.4f}<" in section and f">{6 * hours:.4f}<" in section
    assert ">271<" not in section
