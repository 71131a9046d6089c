"""The morning report's GPU-host lines: an unreadable host leads, a host busy until the deadline
follows ("gx10 busy all night: 4 GPU jobs not run"), other skips and failures are not host lines."""

from __future__ import annotations

import pandas as pd

from runner.analysis.findings import findings_html, gpu_host_findings
from runner.dispatch.placement import skip_reason


def job(host: str, status: str, reason: str, checkpoint: str = "qwen3-4b") -> dict:
    return {
        "run_id": "night-1",
        "probe": "profile",
        "host": host,
        "checkpoint": checkpoint,
        "status": status,
        "reason": reason,
    }


def test_unreadable_hosts_lead_then_busy_ones_with_their_job_counts():
    busy = "gx10: GPU 0 busy: pid 4242 (user ana, 20.00 GiB) computes on it"
    rows = [job("gx10", "skipped", skip_reason("gx10", busy, unreadable=False), f"c{i}") for i in range(4)]
    rows.append(
        job("ana-ml2", "skipped", skip_reason("ana-ml2", "ana-ml2: GPU 0 unreachable: GPU 0 lost", unreadable=True))
    )
    rows.append(job("ana-ml2", "failed", "ModuleNotFoundError: mytrainer"))
    rows.append(job("gx10", "skipped", "no GPU: host gx10 has gpus: 0 in cluster.yaml"))  # config, not the card
    lines = gpu_host_findings(pd.DataFrame(rows))
    assert [kind for kind, _ in lines] == ["unreadable", "busy"]
    assert lines[0][1].startswith("ana-ml2 GPUs could not be read: 1 GPU job not run (GPU host ana-ml2 could not")
    assert lines[1][1].startswith("gx10 busy all night: 4 GPU jobs not run (no idle GPU on gx10 before the deadline")
    assert "pid 4242 (user ana, 20.00 GiB)" in lines[1][1]
    page = findings_html([], alerts=[], watched=[], problems=pd.DataFrame(rows))
    assert (
        page.index("ana-ml2 GPUs could not be read")
        < page.index("gx10 busy all night")
        < page.index("What this run found")
    )


def test_a_run_where_every_gpu_job_ran_has_no_host_line():
    assert gpu_host_findings(pd.DataFrame([job("gx10", "ok", "")])) == []
    assert gpu_host_findings(pd.DataFrame(columns=["probe", "host", "checkpoint", "status", "reason"])) == []
