"""The morning report: one self-contained HTML page per sweep run, and a few lines for stdout.

`write_report(store, run_id)` writes `<store>/reports/<run_id>.html`. It opens with what the run
found (runner.analysis.findings): each probe's answer per host and checkpoint with a one-line
headline, what changed since the last run (drift alerts, answers that differ), what failed or was
skipped and why. The raw tables follow, collapsed in one <details>: jobs per host, a table and bar
charts per carrier (`carrier.carriers`), step-time scaling curves (`profile.scaling`),
kernel-category breakdowns (`profile.kernels`), each probe's job summaries, and any other table the
run wrote. Images are embedded as base64 PNG data URIs and the page loads nothing else, so it can
be mailed or opened from a laptop. A table the run did not write is simply left out.

Drift is watched on every table of the run whose headline metric has a spread column (timings):
runner.analysis.drift's rule against the same host's earlier runs of the same work.

The data is gathered in runner.analysis.report_data, the page drawn in runner.analysis.report_html.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.analysis.drift import SPREAD_LIMIT_PCT
from runner.analysis.findings import gpu_host_findings
from runner.analysis.report_data import RunData, collect, problems
from runner.analysis.report_html import render_html
from runner.store.store import Store


def write_report(
    store: Store, run_id: str, *, threshold_pct: float = 3.0, max_spread_pct: float = SPREAD_LIMIT_PCT
) -> tuple[Path, str]:
    """Write the run's HTML report; return its path and a short text summary for stdout."""
    data = collect(store, run_id, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct)
    path = store.root / "reports" / f"{run_id}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_text(render_html(data), encoding="utf-8")
    os.replace(tmp, path)  # a report may be rewritten: it is derived, not a measurement
    return path, summary_text(data, path)


def summary_text(data: RunData, path: Path) -> str:
    """A few lines for stdout (the sweep prints the report's path itself)."""
    if data.jobs.empty:
        return f"run {data.run_id}: no jobs of this run in the store (nothing left to do, or an unknown run)"
    counts = data.jobs["status"].value_counts()
    hosts = sorted(data.jobs["host"].astype(str).unique())
    lines = [
        f"run {data.run_id}: {len(data.jobs)} job(s) on {len(hosts)} host(s) ({', '.join(hosts)}): "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "skipped"))
    ]
    lines += [f"  {text}" for _, text in gpu_host_findings(problems(data.jobs))]
    for _, job in problems(data.jobs).iterrows():
        status = "" if job["status"] == "ok" else f"{job['status']}: "  # ok: the reason names the checks
        lines.append(f"  {status}{job['probe']} on {job['host']}/{job['checkpoint']}: {job['reason']}")
    lines.append(f"drift alerts: {len(data.alerts)}" if data.alerts else "drift alerts: none")
    lines += [f"  {a}" for a in data.alerts]
    return "\n".join(lines)
