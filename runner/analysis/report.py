"""The morning report: one self-contained HTML page per sweep run, and a few lines for stdout.

`write_report(store, run_id)` writes `<store>/reports/<run_id>.html`: drift alerts first (what
got slower), then failed and skipped jobs with their reasons, then per-host comparisons: a table
and bar charts per carrier (`carrier.carriers`), step-time scaling curves (`profile.scaling`),
kernel-category breakdowns (`profile.kernels`), each probe's job summaries, and any other table
the run wrote. Images are embedded as base64 PNG data URIs and the page loads nothing else, so
it can be mailed or opened from a laptop. A table the run did not write is simply left out.

Drift is watched on every table of the run whose headline metric has a spread column (timings):
runner/analysis/drift.py's rule against the same host's earlier runs of the same work.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from probes.result import InputError
from runner.analysis import plots
from runner.analysis.drift import (
    SPREAD_LIMIT_PCT,
    above_spread_limit,
    default_metric,
    describe_alert,
    drift_table,
    spread_column,
    spread_pct,
)
from runner.store.store import KEY_COLUMNS, Store
from runner.tables import format_value

SPAN = "__span__"
"""A row holding this key renders as its first column, then this text across the rest."""
MAX_ROWS = 40
"""Rows shown per generic table; the store keeps the rest."""
CARRIER_METRICS = (("tok_per_s", "tokens/s", 1.0), ("step_s", "s/step", 1.0),
                   ("peak_mem_bytes", "peak memory, GiB", 1 / 2**30), ("mfu", "MFU", 1.0))
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
    all_jobs = store.jobs()
    jobs = all_jobs[all_jobs["run_id"] == run_id]
    jobs = jobs.sort_values("finished_at", kind="stable").drop_duplicates("job_id", keep="last")
    tables, alerts, watched = {}, [], []
    for name in store.table_names():
        if name == "jobs":
            continue
        history = store.read(name, jobs=all_jobs)
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
    return RunData(run_id=run_id, jobs=jobs.reset_index(drop=True), tables=tables, alerts=alerts,
                   watched=watched)


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
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px auto;
max-width:1100px;color:#1d1d1f;padding:0 16px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin-bottom:6px} .muted{color:#666;font-size:13px}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0 12px}
th,td{border:1px solid #ddd;padding:3px 6px;text-align:left} td{max-width:360px;overflow-wrap:break-word}
th,td.num,td.nw{white-space:nowrap} td.num{text-align:right;font-variant-numeric:tabular-nums}
th{background:#f4f4f6} .alert{background:#fde8e8;border-left:4px solid #d33;padding:6px 10px;margin:4px 0}
.ok{background:#e9f7ee;border-left:4px solid #2a8;padding:6px 10px} .bad td{background:#fff4f4}
.wide{overflow-x:auto;max-width:100%} img{max-width:100%;height:auto;display:block;margin:6px 0 14px}
"""


def render_html(data: RunData) -> str:
    if data.jobs.empty:
        sections = [f"<h1>labprobe sweep {html.escape(data.run_id)}</h1><p class=\"ok\">This run ran no "
                    "jobs: everything its plan asks for was already stored (or the run id is unknown).</p>"]
    else:
        sections = [_overview(data), _alerts(data), _failed_and_skipped(data), _carriers(data),
                    _scaling(data), _kernels(data), _job_summaries(data), _other_tables(data)]
    title = f"labprobe sweep {html.escape(data.run_id)}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{title}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(s for s in sections if s) + "\n</body></html>\n")


def html_table(rows: Iterable[dict[str, Any]], *, row_class: Iterable[str] | None = None) -> str:
    rows = list(rows)
    if not rows:
        return "<p class=\"muted\">(no rows)</p>"
    columns = list(dict.fromkeys(k for r in rows for k in r if k != SPAN))
    classes = list(row_class) if row_class is not None else [""] * len(rows)
    # Long snake_case headers may break after an underscore, never inside a word.
    head = "".join(f"<th>{html.escape(str(c)).replace('_', '_<wbr>')}</th>" for c in columns)
    body = []
    for row, cls in zip(rows, classes):
        cells = []
        if SPAN in row:  # a job with no measurements: its first cell, then one cell saying why
            first = html.escape(format_value(row.get(columns[0])))
            cells = [f'<td class="nw">{first}</td><td colspan="{len(columns) - 1}">{html.escape(row[SPAN])}</td>']
            columns_here: list[str] = []
        else:
            columns_here = columns
        for c in columns_here:
            value = row.get(c)
            value = None if _is_missing(value) else value
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            short = value is not None and len(format_value(value)) <= 24  # names stay on one line
            td = '<td class="num">' if numeric else ('<td class="nw">' if short else "<td>")
            cells.append(f"{td}{'' if value is None else html.escape(format_value(value))}</td>")
        tr = f'<tr class="{cls}">' if cls else "<tr>"
        body.append(f"{tr}{''.join(cells)}</tr>")
    # A table wider than the page scrolls by itself; the page never does.
    return (f"<div class=\"wide\"><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody>"
            "</table></div>")


def _is_missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


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
def _overview(data: RunData) -> str:
    jobs = data.jobs
    started, finished = jobs["started_at"].min(), jobs["finished_at"].max()
    plans = ", ".join(sorted(p for p in jobs.get("plan", pd.Series(dtype=str)).astype(str).unique() if p))
    per_host = []
    for host, rows in jobs.groupby("host", sort=True):
        counts = rows["status"].value_counts()
        per_host.append({"host": str(host), "jobs": len(rows), "ok": int(counts.get("ok", 0)),
                         "failed": int(counts.get("failed", 0)), "skipped": int(counts.get("skipped", 0)),
                         "busy_s": float(rows["wall_s"].sum())})
    return (f"<h1>labprobe sweep {html.escape(data.run_id)}</h1>"
            f"<p class=\"muted\">plan {html.escape(plans or '(none)')} · {_plain(started)} → "
            f"{_plain(finished)} UTC · {len(jobs)} jobs · probes "
            f"{html.escape(', '.join(sorted(jobs['probe'].unique())))}</p>" + html_table(per_host))


def _alerts(data: RunData) -> str:
    watched = html.escape("; ".join(data.watched) or "no timed table in this run")
    if not data.alerts:
        return f"<h2>Drift alerts</h2><p class=\"ok\">None. Watched: {watched}.</p>"
    items = "".join(f"<div class=\"alert\">{html.escape(a)}</div>" for a in data.alerts)
    return f"<h2>Drift alerts ({len(data.alerts)})</h2>{items}<p class=\"muted\">Watched: {watched}.</p>"


def _failed_and_skipped(data: RunData) -> str:
    bad = _problems(data.jobs)
    if bad.empty:
        return "<h2>Failed and skipped jobs</h2><p class=\"ok\">Every job ran, and every check passed.</p>"
    rows = _records(bad, ["status", "probe", "host", "checkpoint", "reason", "wall_s", "job_id"])
    return (f"<h2>Failed and skipped jobs, failed checks ({len(bad)})</h2>"
            + html_table(rows, row_class=["bad" if r["status"] == "failed" else "" for r in rows]))


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
