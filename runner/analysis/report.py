"""The morning report: one self-contained HTML page per sweep run, and a few lines for stdout.

`write_report(store, run_id)` writes `<store>/reports/<run_id>.html` (`labprobe report` and
`sweep --report` both come here, for any run the store knows). It opens with what the run
found (runner.analysis.findings): each probe's answer per host and checkpoint with a one-line
headline, what changed since the last run (drift alerts, answers that differ), what failed or was
skipped and why. The raw tables follow, collapsed in one <details>: jobs per host, a table and bar
charts per carrier (`carrier.carriers`), step-time scaling curves (`profile.scaling`),
kernel-category breakdowns (`profile.kernels`), each probe's job summaries, and any other table the
run wrote. Images are embedded as base64 PNG data URIs and the page loads nothing else, so it can
be mailed or opened from a laptop. A table none of the shown jobs wrote is simply left out. Where
the run did not do a job ok (a rerun found it done, or it failed), the answer, its rows and its plots
are the newest ok earlier run's, marked with that run's id (runner.analysis.report_data).

Drift is watched on every table of the run whose headline metric has a spread column (timings):
runner.analysis.drift's rule against the same host's earlier runs of the same work.

The data is gathered in runner.analysis.report_data, the page drawn in runner.analysis.report_html.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.analysis.drift import SPREAD_LIMIT_PCT
from runner.analysis.findings import gpu_host_findings
from runner.analysis.recommend import Recommendation, from_store
from runner.analysis.recommend_text import NO_VERDICT
from runner.analysis.report_data import RunData, collect, gpu_waits, problems
from runner.analysis.report_html import render_html
from runner.analysis.report_runs import Work, night_line
from runner.dispatch.lock import holder
from runner.store.store import Store


def write_report(
    store: Store,
    run_id: str,
    *,
    threshold_pct: float = 3.0,
    max_spread_pct: float = SPREAD_LIMIT_PCT,
    work: list[Work] | None = None,
    path: Path | None = None,
    cluster=None,
) -> tuple[Path | str, str]:
    """Write the run's HTML report (to the local file `path`, default `<store>/reports/<run_id>.html`,
    an object on an object store); return where and a short text summary for stdout. `work`: the run's
    planned work (report_data.collect). `cluster`: the lab's file, whose budget the report leads with
    (`labprobe recommend`'s verdict) and prices every hours figure for. A report may be rewritten: it is
    derived, not a measurement."""
    data = collect(store, run_id, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct, work=work)
    data.night = night_line(store, run_id, holder(store.place))
    data.budget = cluster.spec.budget if cluster is not None else None
    data.recommendation = _recommendation(store, cluster)
    if path is None:
        where: Path | str = store.place.write_text(store.place.report(run_id), render_html(data))
        return (Path(where) if store.local else where), summary_text(data, where)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_text(render_html(data), encoding="utf-8")
    os.replace(tmp, path)
    return path, summary_text(data, path)


def _recommendation(store: Store, cluster) -> Recommendation | None:
    """`labprobe recommend`'s answer for the cluster's budget; None without a budget to price."""
    if cluster is None or cluster.spec.budget is None:
        return None
    return from_store(store, cluster)


def summary_text(data: RunData, path: Path | str) -> str:
    """A few lines for stdout (the sweep prints the report's path itself): the night's failure first, then
    the verdict for the lab's budget, the run's counts, its GPU jobs' waits, its problems and drift."""
    lead = [data.night] if data.night else []
    if data.recommendation is not None:
        lead.append(data.recommendation.verdict or NO_VERDICT)
    return "\n".join([*lead, _run_text(data)])


def _run_text(data: RunData) -> str:
    earlier = sorted(set(data.shown["run_id"].astype(str)) - {data.run_id}) if not data.shown.empty else []
    reused = f"; answers of earlier runs shown: {', '.join(earlier)}" if earlier else ""
    if data.jobs.empty:
        if not data.answers:
            return f"run {data.run_id}: no jobs of this run in the store, and no record of its plan"
        if data.night:
            return f"run {data.run_id}: ran no job; its plan's answers are the store's newest{reused}"
        return f"run {data.run_id}: ran no job (all already stored){reused}"
    counts = data.jobs["status"].value_counts()
    hosts = sorted(data.jobs["host"].astype(str).unique())
    lines = [
        f"run {data.run_id}: {len(data.jobs)} job(s) on {len(hosts)} host(s) ({', '.join(hosts)}): "
        + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "skipped"))
        + reused
    ]
    lines += [f"  {text}" for _, text in gpu_host_findings(problems(data.jobs))]
    for wait in gpu_waits(data.jobs):
        waited = "waited: not recorded" if wait["waited_s"] is None else f"waited {wait['waited_s']:.0f} s"
        lines.append(
            f"  GPU job {wait['status']}: {wait['probe']} {wait['checkpoint']} @ {wait['host']} on {wait['card']}: "
            f"{waited}: {wait['why']}"
        )
    for _, job in problems(data.jobs).iterrows():
        status = "" if job["status"] == "ok" else f"{job['status']}: "  # ok: the reason names the checks
        lines.append(f"  {status}{job['probe']} on {job['host']}/{job['checkpoint']}: {job['reason']}")
    lines.append(f"drift alerts: {len(data.alerts)}" if data.alerts else "drift alerts: none")
    lines += [f"  {a}" for a in data.alerts]
    return "\n".join(lines)
