"""The morning report: one self-contained HTML page per sweep run, and a few lines for stdout.

`write_report(store, run_id)` writes `<store>/reports/<run_id>.html`. It opens with what the run
found (runner/analysis/findings.py): each probe's answer per host and checkpoint with a one-line
headline, what changed since the last run (drift alerts, answers that differ), what failed or was
skipped and why. The raw tables follow, collapsed in one <details>: jobs per host, a table and bar
charts per carrier (`carrier.carriers`), step-time scaling curves (`profile.scaling`),
kernel-category breakdowns (`profile.kernels`), each probe's job summaries, and any other table the
run wrote. Images are embedded as base64 PNG data URIs and the page loads nothing else, so it can
be mailed or opened from a laptop. A table the run did not write is simply left out.

Drift is watched on every table of the run whose headline metric has a spread column (timings):
runner/analysis/drift.py's rule against the same host's earlier runs of the same work.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from pathlib import Path
from typing import Any

import pandas as pd

from probes.result import InputError
from runner.analysis import answers, plots
from runner.analysis.answers import ProbeAnswers
from runner.analysis.drift import (
    SPREAD_LIMIT_PCT,
    above_spread_limit,
    default_metric,
    describe_alert,
    drift_table,
    spread_column,
    spread_pct,
)
from runner.analysis.findings import findings_html
from runner.analysis.html_table import CSS, SPAN, html_table
from runner.store.store import JOB, KEY_COLUMNS, Store, latest
from runner.tables import format_value

MAX_ROWS = 40
"""Rows shown per generic table; the store keeps the rest."""
CARRIER_METRICS = (("tok_per_s", "tokens/s", 1.0), ("step_s", "s/step", 1.0),
                   ("peak_mem_bytes", "peak memory, GiB", 1 / 2**30),
                   ("mfu_vs_datasheet_peak", "MFU (datasheet peak)", 1.0), ("mfu", "MFU", 1.0))
"""`mfu` is the column's name in rows stored before MFU was named by its peak."""
CARRIER_FACTS = ("params_total", "params_trainable", "tokens_per_step")
"""Properties of the carrier and its config, not measurements: said once above its table."""
SCALING_X = ("seq_len", "num_tokens", "tokens_per_step", "length")


@dataclasses.dataclass
class RunData:
    run_id: str
    jobs: pd.DataFrame
    """This run's job rows, the newest per job_id."""
    tables: dict[str, pd.DataFrame]
    """Every probe table's rows written by this run."""
    alerts: list[str]
    watched: list[str]
    """`table: metric` pairs drift was checked on."""
    answers: list[ProbeAnswers] = dataclasses.field(default_factory=list)
    """Each probe's answer per host x checkpoint (runner/analysis/answers.py)."""

    @property
    def colors(self) -> dict[str, str]:
        return plots.host_colors(self.jobs["host"].astype(str).unique().tolist())


def write_report(store: Store, run_id: str, *, threshold_pct: float = 3.0,
                 max_spread_pct: float = SPREAD_LIMIT_PCT) -> tuple[Path, str]:
    """Write the run's HTML report; return its path and a short text summary for stdout."""
    data = collect(store, run_id, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct)
    path = store.root / "reports" / f"{run_id}.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    tmp.write_text(render_html(data), encoding="utf-8")
    os.replace(tmp, path)  # a report may be rewritten: it is derived, not a measurement
    return path, summary_text(data, path)


def collect(store: Store, run_id: str, *, threshold_pct: float, max_spread_pct: float) -> RunData:
    """This run's jobs and rows, and the drift alerts its rows raise. A run with no jobs (a resumed
    sweep that found everything stored) gives an empty report that says so."""
    all_jobs = store.jobs()  # first: every table read after it holds these jobs' rows
    jobs = latest(all_jobs[all_jobs["run_id"] == run_id], JOB)
    tables, alerts, watched, histories = {}, [], [], {}
    for name in store.table_names():
        if name == "jobs":
            continue
        history = histories[name] = store.read(name, jobs=all_jobs)
        rows = history[history["run_id"] == run_id]
        if rows.empty:
            continue
        tables[name] = rows.reset_index(drop=True)
        metric = _watched_metric(rows)
        if metric is None:
            continue
        watched.append(f"{name}: {metric}")
        drift = drift_table(history, metric, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct)
        for _, row in drift[(drift["run_id"] == run_id) & drift["alert"]].iterrows():
            alerts.append(describe_alert(row, metric, drift.attrs["by"]))
    found = answers.build(all_jobs, lambda name, runs: histories.get(name, pd.DataFrame()), run_id)
    return RunData(run_id=run_id, jobs=jobs.reset_index(drop=True), tables=tables, alerts=alerts,
                   watched=watched, answers=found)


def _watched_metric(rows: pd.DataFrame) -> str | None:
    try:
        metric = default_metric(rows)
    except InputError:
        return None
    return metric if spread_column(rows.columns, metric) else None


def summary_text(data: RunData, path: Path) -> str:
    """A few lines for stdout (the sweep prints the report's path itself)."""
    if data.jobs.empty:
        return f"run {data.run_id}: no jobs of this run in the store (nothing left to do, or an unknown run)"
    counts = data.jobs["status"].value_counts()
    hosts = sorted(data.jobs["host"].astype(str).unique())
    lines = [f"run {data.run_id}: {len(data.jobs)} job(s) on {len(hosts)} host(s) ({', '.join(hosts)}): "
             + ", ".join(f"{counts.get(s, 0)} {s}" for s in ("ok", "failed", "skipped"))]
    for _, job in _problems(data.jobs).iterrows():
        status = "" if job["status"] == "ok" else f"{job['status']}: "  # ok: the reason names the checks
        lines.append(f"  {status}{job['probe']} on {job['host']}/{job['checkpoint']}: {job['reason']}")
    lines.append(f"drift alerts: {len(data.alerts)}" if data.alerts else "drift alerts: none")
    lines += [f"  {a}" for a in data.alerts]
    return "\n".join(lines)


def _problems(jobs: pd.DataFrame) -> pd.DataFrame:
    """Failed and skipped jobs, and ok jobs with a reason (a probe check that failed), worst first."""
    bad = jobs[(jobs["status"] != "ok") | (jobs["reason"].fillna("") != "")].copy()
    bad["order"] = bad["status"].map({"failed": 0, "skipped": 1, "ok": 2})
    return bad.sort_values(["order", "probe", "host", "checkpoint"], kind="stable").drop(columns="order")


# -- HTML ---------------------------------------------------------------------------------------
def render_html(data: RunData) -> str:
    if data.jobs.empty:
        sections = [(f"<h1>labprobe sweep {html.escape(data.run_id)}</h1><p class=\"ok\">This run ran no "
                     "jobs: everything its plan asks for was already stored (or the run id is unknown).</p>")]
    else:
        # What the run found first (and the measured changes to the step); the raw tables follow, collapsed.
        raw = [_per_host(data), _carriers(data), _scaling(data), _kernels(data), _job_summaries(data),
               _other_tables(data)]
        sections = [_title(data), findings_html(data.answers, alerts=data.alerts, watched=data.watched,
                                                problems=_problems(data.jobs)), _advice(data),
                    "<details id=\"raw\"><summary>Raw tables: jobs per host, carriers, scaling curves, kernels, "
                    "job summaries, every table of the run</summary>" + "".join(s for s in raw if s) + "</details>"]
    title = f"labprobe sweep {html.escape(data.run_id)}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{CSS}</style></head><body>\n"
            + "\n".join(s for s in sections if s) + "\n</body></html>\n")


def _img(fig, alt: str) -> str:
    return f"<img alt=\"{html.escape(alt)}\" src=\"{plots.data_uri(fig)}\">"


def _records(frame: pd.DataFrame, columns: list[str]) -> list[dict[str, Any]]:
    return [{c: _plain(v) for c, v in row.items()} for row in frame[columns].to_dict("records")]


def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            return value.item()
        except (ValueError, AttributeError):
            return value
    if isinstance(value, pd.Timestamp):
        return value.strftime("%Y-%m-%d %H:%M")
    return value


def _own_columns(frame: pd.DataFrame, *, drop: tuple[str, ...] = ()) -> list[str]:
    """The probe's own columns, less those with nothing in them (GPU-only columns on a CPU run)."""
    return [c for c in frame.columns if c not in KEY_COLUMNS and c not in drop and not c.endswith("_json")
            and not frame[c].isna().all()]


# -- sections -----------------------------------------------------------------------------------
def _title(data: RunData) -> str:
    jobs = data.jobs
    started, finished = jobs["started_at"].min(), jobs["finished_at"].max()
    plans = ", ".join(sorted(p for p in jobs.get("plan", pd.Series(dtype=str)).astype(str).unique() if p))
    return (f"<h1>labprobe sweep {html.escape(data.run_id)}</h1>"
            f"<p class=\"muted\">plan {html.escape(plans or '(none)')} · {_plain(started)} → "
            f"{_plain(finished)} UTC · {len(jobs)} jobs · probes "
            f"{html.escape(', '.join(sorted(jobs['probe'].unique())))}</p>")


def _per_host(data: RunData) -> str:
    per_host = []
    for host, rows in data.jobs.groupby("host", sort=True):
        counts = rows["status"].value_counts()
        per_host.append({"host": str(host), "jobs": len(rows), "ok": int(counts.get("ok", 0)),
                         "failed": int(counts.get("failed", 0)), "skipped": int(counts.get("skipped", 0)),
                         "busy_s": float(rows["wall_s"].sum())})
    return "<h2>Jobs per host</h2>" + html_table(per_host)


def _carriers(data: RunData) -> str:
    parts = []
    for name in [n for n in data.tables if n.startswith("carrier.")]:
        frame = data.tables[name]
        for checkpoint, rows in frame.groupby("checkpoint", sort=True):
            rows = rows.sort_values("host")
            parts.append(f"<h3>{html.escape(str(checkpoint))} <span class=\"muted\">({html.escape(name)})</span></h3>")
            own = _own_columns(rows)
            # What every host shares (parameter counts, tokens per step) is said once, above.
            shared = [c for c in own if c in CARRIER_FACTS and rows[c].astype(str).nunique() == 1]
            if shared:
                parts.append("<p class=\"muted\">" + " · ".join(
                    f"{html.escape(c)} {html.escape(format_value(_plain(rows[c].iloc[0])))}" for c in shared) + "</p>")
            records = _records(rows, ["host"] + [c for c in own if c not in shared])
            missing = data.jobs[(data.jobs["probe"] == name.split(".")[0]) & (data.jobs["status"] != "ok")
                                & (data.jobs["checkpoint"] == checkpoint)]
            records += [{"host": j["host"], SPAN: f"{j['status']}: {j['reason']}"} for _, j in missing.iterrows()]
            parts.append(html_table(records, row_class=["bad" if SPAN in r else "" for r in records]))
            if "variant" in rows:  # the bars compare hosts on the same step: the baseline's rows
                rows = rows[rows["variant"].isna() | (rows["variant"] == "baseline")]
            metrics = [(c, label, scale) for c, label, scale in CARRIER_METRICS
                       if c in rows and pd.to_numeric(rows[c], errors="coerce").notna().any()]
            if metrics:
                fig = plots.host_bars(rows, metrics, untrusted=_untrusted(rows), colors=data.colors,
                                      title=f"{checkpoint}: per host (hatched: spread above {SPREAD_LIMIT_PCT:g}%, "
                                            "not yet a number)")
                parts.append(_img(fig, f"{checkpoint} per host"))
    return "<h2>Carriers: per-host comparison</h2>" + "".join(parts) if parts else ""


def _untrusted(rows: pd.DataFrame) -> pd.Series:
    if "trustworthy" in rows:
        return rows["trustworthy"].map(lambda v: v is False or v == 0)
    spread = spread_column(rows.columns, "step_s")
    if spread is None:
        return pd.Series(False, index=rows.index)
    return above_spread_limit(spread_pct(pd.to_numeric(rows[spread], errors="coerce"), spread))


def _scaling(data: RunData) -> str:
    frame = data.tables.get("profile.scaling")
    if frame is None:
        return ""
    x = next((c for c in SCALING_X if c in frame), None)
    y = "step_s" if "step_s" in frame else next((c for c in frame if c.endswith("_s") and c not in KEY_COLUMNS), None)
    parts = ["<h2>Step-time scaling per host</h2>"]
    for checkpoint, rows in frame.groupby("checkpoint", sort=True):
        parts.append(f"<h3>{html.escape(str(checkpoint))}</h3>")
        if x and y:
            fig = plots.scaling_curves(rows, x, y, title=f"{checkpoint}: {y} against {x} (dashed: fit)",
                                       colors=data.colors, fit="fit_s" if "fit_s" in rows else None)
            parts.append(_img(fig, f"{checkpoint} scaling"))
            table = rows.pivot_table(index=x, columns="host", values=y, aggfunc="median")
            parts.append(html_table([{f"{y} by {x}": _plain(i), **{str(h): _plain(v) for h, v in vals.items()}}
                                     for i, vals in table.iterrows()]))
        else:
            parts.append(html_table(_records(rows.sort_values("host"), ["host"] + _own_columns(rows))))
    return "".join(parts)


def _kernels(data: RunData) -> str:
    frame = data.tables.get("profile.kernels")
    if frame is None or "category" not in frame:
        return ""
    value = "kernel_s_per_step" if "kernel_s_per_step" in frame else default_metric(frame)
    parts = ["<h2>Kernel time by category</h2>"]
    for checkpoint, rows in frame.groupby("checkpoint", sort=True):
        parts.append(f"<h3>{html.escape(str(checkpoint))}</h3>")
        parts.append(_img(plots.stacked_categories(rows, category="category", value=value, scale=1e3,
                                                   unit="ms per step", title=f"{checkpoint}: {value} by category"),
                          f"{checkpoint} kernels"))
        table = rows.pivot_table(index="category", columns="host", values=value, aggfunc="sum") * 1e3
        table = table.loc[table.sum(axis=1).sort_values(ascending=False).index]
        parts.append(html_table([{"category (ms/step)": cat, **{str(h): v for h, v in vals.items()}}
                                 for cat, vals in table.iterrows()]))
    return "".join(parts)


def _advice(data: RunData) -> str:
    """Each carrier/profile job's `advice` (the measured variants ranked by speed-up), per host."""
    ok = data.jobs[data.jobs["status"] == "ok"]
    items = []
    for _, job in ok.sort_values(["host", "checkpoint"]).iterrows():
        advice = json.loads(job["summary_json"] or "{}").get("advice") or []
        if advice:
            lines = "".join(f"<li>{html.escape(str(a))}</li>" for a in advice)
            items.append(f"<h3>{html.escape(f'{job.host} · {job.probe} {job.checkpoint}')}</h3><ol>{lines}</ol>")
    return "<h2>Advice: measured changes to the step, fastest first</h2>" + "".join(items) if items else ""


def _job_summaries(data: RunData) -> str:
    """Each probe's headline numbers, one column per job (host and checkpoint), one row per figure."""
    ok = data.jobs[data.jobs["status"] == "ok"]
    parts = []
    for probe, rows in ok.groupby("probe", sort=True):
        columns: dict[str, dict[str, Any]] = {}
        for _, job in rows.sort_values(["checkpoint", "host"]).iterrows():
            summary = json.loads(job["summary_json"] or "{}")
            scalars = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
            scalars.update(wall_s=float(job["wall_s"]), note=job["reason"] or None)
            name = str(job["host"]) if rows["checkpoint"].nunique() == 1 else f"{job['host']} · {job['checkpoint']}"
            columns[name] = scalars
        keys = [k for k in dict.fromkeys(k for c in columns.values() for k in c)
                if any(c.get(k) is not None for c in columns.values())]
        checkpoint = f" on {rows['checkpoint'].iloc[0]}" if rows["checkpoint"].nunique() == 1 else ""
        parts.append(f"<h3>{html.escape(str(probe) + checkpoint)}</h3>"
                     + html_table([{"": k, **{n: c.get(k) for n, c in columns.items()}} for k in keys]))
    return "<h2>Job summaries per host</h2>" + "".join(parts) if parts else ""


def _other_tables(data: RunData) -> str:
    shown = {"profile.scaling", "profile.kernels"} | {n for n in data.tables if n.startswith("carrier.")}
    parts = []
    for name, frame in data.tables.items():
        if name in shown:
            continue
        frame = frame.sort_values(["checkpoint", "host"], kind="stable")
        more = f" <span class=\"muted\">(first {MAX_ROWS} of {len(frame)})</span>" if len(frame) > MAX_ROWS else ""
        parts.append(f"<h3>{html.escape(name)}{more}</h3>"
                     + html_table(_records(frame.head(MAX_ROWS), ["host", "checkpoint"] + _own_columns(frame))))
    return "<h2>Other tables</h2>" + "".join(parts) if parts else ""
