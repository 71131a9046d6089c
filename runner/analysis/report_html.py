"""The report's HTML page: what the run found first (runner.analysis.findings), then the plots (the host
comparisons the probes declare, then each probe's own sections: carriers with their bar charts, scaling curves
with the fit, kernel categories), then the raw tables collapsed: jobs per host, job summaries and every other
table. Images are embedded as base64 PNG data URIs.

What a probe's section shows is declared by the probe (`Presentation.sections`, probes/<name>/present.py); here
is how each kind of section is drawn, probes in the registry's order."""

from __future__ import annotations

import html
import json
from typing import Any

import pandas as pd

import probes
from runner.analysis import plots
from runner.analysis.drift import SPREAD_LIMIT_PCT, above_spread_limit, default_metric, spread_column, spread_pct
from runner.analysis.findings import findings_html
from runner.analysis.html_table import CSS, SPAN, html_table
from runner.analysis.rates import HOURS, budget_hours
from runner.analysis.report_data import RunData, problems
from runner.analysis.report_lead import gpu_waits_html, night_html, question_html
from runner.analysis.report_plots import bar_labels, comparisons_html, marked, runs_note
from runner.store.store import KEY_COLUMNS
from runner.tables import format_value

MAX_ROWS = 40
"""Rows shown per generic table; the store keeps the rest."""


def render_html(data: RunData) -> str:
    if data.jobs.empty and not data.answers:
        sections = [
            f"<h1>labprobe sweep {html.escape(data.run_id)}</h1>",
            night_html(data)
            or '<p class="ok">This run stored no jobs, and the store has no record of its plan (or the run id is '
            "unknown).</p>",
            question_html(data),
        ]
    else:
        # What the run found first (and the measured changes to the step), then the plots; the raw
        # tables follow, collapsed.
        raw = [_per_host(data), _job_summaries(data), _other_tables(data)]
        plotted = [comparisons_html(data, _img), *_sections(data)]
        sections = [
            _title(data),
            night_html(data),
            question_html(data),
            findings_html(data.answers, alerts=data.alerts, watched=data.watched, problems=problems(data.jobs)),
            gpu_waits_html(data),
            _advice(data),
            runs_note(data) + "".join(s for s in plotted if s),
            '<details id="raw"><summary>Raw tables: jobs per host, job summaries, every table the answers '
            "come from</summary>" + "".join(s for s in raw if s) + "</details>",
        ]
    title = f"labprobe sweep {html.escape(data.run_id)}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title><style>{CSS}</style></head><body>\n"
        + "\n".join(s for s in sections if s)
        + "\n</body></html>\n"
    )


def _img(fig, alt: str) -> str:
    return f'<img alt="{html.escape(alt)}" src="{plots.data_uri(fig)}">'


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
    return [
        c
        for c in frame.columns
        if c not in KEY_COLUMNS and c not in drop and not c.endswith("_json") and not frame[c].isna().all()
    ]


# -- sections -----------------------------------------------------------------------------------
def _title(data: RunData) -> str:
    jobs = data.jobs
    if jobs.empty:  # a rerun that found everything stored: what it relied on
        return (
            f"<h1>labprobe sweep {html.escape(data.run_id)}</h1>"
            f'<p class="muted">ran no job: all {len(data.shown)} answered jobs of its plan were already '
            "stored; their answers follow, each with its run</p>"
        )
    started, finished = jobs["started_at"].min(), jobs["finished_at"].max()
    plans = ", ".join(sorted(p for p in jobs.get("plan", pd.Series(dtype=str)).astype(str).unique() if p))
    return (
        f"<h1>labprobe sweep {html.escape(data.run_id)}</h1>"
        f'<p class="muted">plan {html.escape(plans or "(none)")} · {_plain(started)} → '
        f"{_plain(finished)} UTC · {len(jobs)} jobs · probes "
        f"{html.escape(', '.join(sorted(jobs['probe'].unique())))}</p>"
    )


def _per_host(data: RunData) -> str:
    if data.jobs.empty:
        return ""
    per_host = []
    for host, rows in data.jobs.groupby("host", sort=True):
        counts = rows["status"].value_counts()
        per_host.append(
            {
                "host": str(host),
                "jobs": len(rows),
                "ok": int(counts.get("ok", 0)),
                "failed": int(counts.get("failed", 0)),
                "skipped": int(counts.get("skipped", 0)),
                "busy_s": float(rows["wall_s"].sum()),
            }
        )
    return "<h2>Jobs per host</h2>" + html_table(per_host)


def _sections(data: RunData) -> list[str]:
    """Each probe's own sections, in the registry's order (a probe's in its own order)."""
    return [section_html(data, probe, s) for probe in probes.REGISTRY for s in probes.presentation(probe).sections]


def section_html(data: RunData, probe: str, section: probes.Section) -> str:
    """One section a probe declares, drawn as its kind is ("" where the run has nothing for it)."""
    draw = {probes.HostTables: _host_tables, probes.ScalingCurves: _scaling, probes.CategoryBars: _categories}
    return draw[type(section)](data, probe, section)


def _host_tables(data: RunData, probe: str, section: probes.HostTables) -> str:
    parts = []
    for name in [n for n in data.tables if n.startswith(f"{probe}.")]:
        frame, priced = budget_hours_of(data, name, marked(data.tables[name], data.run_id))
        for checkpoint, rows in frame.groupby("checkpoint", sort=True):
            rows = rows.sort_values([c for c in ("variant", "host") if c in rows], kind="stable")
            parts.append(f'<h3>{html.escape(str(checkpoint))} <span class="muted">({html.escape(name)})</span></h3>')
            parts.append(priced)
            own = _own_columns(rows)
            # What every host shares (parameter counts, tokens per step) is said once, above.
            shared = [c for c in own if c in section.facts and rows[c].astype(str).nunique() == 1]
            if shared:
                parts.append(
                    '<p class="muted">'
                    + " · ".join(
                        f"{html.escape(c)} {html.escape(format_value(_plain(rows[c].iloc[0])))}" for c in shared
                    )
                    + "</p>"
                )
            records = _records(rows, lead_columns(rows, [c for c in own if c not in shared]))
            missing = data.jobs[
                (data.jobs["probe"] == probe) & (data.jobs["status"] != "ok") & (data.jobs["checkpoint"] == checkpoint)
            ]
            records += [{"host": j["host"], SPAN: f"{j['status']}: {j['reason']}"} for _, j in missing.iterrows()]
            parts.append(html_table(records, row_class=["bad" if SPAN in r else "" for r in records]))
            if "variant" in rows:  # the bars compare hosts on the same step: the baseline's rows
                rows = rows[rows["variant"].isna() | (rows["variant"] == "baseline")]
            metrics = section.bar_metrics(rows) if section.bar_metrics else []
            if metrics:
                fig = plots.host_bars(
                    rows,
                    metrics,
                    untrusted=_untrusted(rows),
                    colors=data.colors,
                    labels=bar_labels(rows),
                    title=f"{checkpoint}: per host (hatched: spread above {SPREAD_LIMIT_PCT:g}%, not yet a number)",
                )
                parts.append(_img(fig, f"{checkpoint} per host"))
    return f"<h2>{html.escape(section.title)}</h2>" + "".join(parts) if parts else ""


def lead_columns(rows: pd.DataFrame, rest: list[str]) -> list[str]:
    """The variant (where the rows have one) and the host first, then the rest: a row's work, then where."""
    lead = [c for c in ("variant", "host") if c in rows]
    return lead + [c for c in rest if c not in lead]


def budget_hours_of(data: RunData, name: str, frame: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A table's stored hours (each job's own budget) recomputed for the lab's budget, with a line saying so;
    without a budget they are dropped: stored, they would compare two budgets as if one."""
    have = [c for c in HOURS if c in frame]
    if not have:
        return frame, ""
    probe, table = name.split(".", 1)
    priced = budget_hours(probe, table, frame, data.budget) if data.budget is not None else None
    if priced is None:
        return frame.drop(columns=have), (
            '<p class="muted">Stored hours left out: each priced its own job\'s budget (<code>labprobe recommend</code> '
            "prices cluster.yaml's).</p>"
        )
    return priced, f'<p class="muted">Hours for the lab\'s budget, {html.escape(data.budget.describe())}.</p>'


def _untrusted(rows: pd.DataFrame) -> pd.Series:
    if "trustworthy" in rows:
        return rows["trustworthy"].map(lambda v: v is False or v == 0)
    spread = spread_column(rows.columns, "step_s")
    if spread is None:
        return pd.Series(False, index=rows.index)
    return above_spread_limit(spread_pct(pd.to_numeric(rows[spread], errors="coerce"), spread))


def _scaling(data: RunData, probe: str, section: probes.ScalingCurves) -> str:
    frame = data.tables.get(f"{probe}.{section.table}")
    if frame is None:
        return ""
    x = next((c for c in section.x if c in frame), None)
    y = section.y if section.y in frame else next((c for c in frame if c.endswith("_s") and c not in KEY_COLUMNS), None)
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    for checkpoint, rows in frame.groupby("checkpoint", sort=True):
        parts.append(f"<h3>{html.escape(str(checkpoint))}</h3>")
        if x and y:
            lines = bar_labels(rows, within=(x,))
            fig = plots.scaling_curves(
                rows,
                x,
                y,
                title=f"{checkpoint}: {y} against {x} (dashed: fit)",
                colors=data.colors,
                fit=section.fit if section.fit in rows else None,
                labels=lines,
            )
            parts.append(_img(fig, f"{checkpoint} {section.table}"))
            table = rows.assign(_line=lines).pivot_table(index=x, columns="_line", values=y, aggfunc="median")
            parts.append(
                html_table(
                    [
                        {f"{y} by {x}": _plain(i), **{str(h): _plain(v) for h, v in vals.items()}}
                        for i, vals in table.iterrows()
                    ]
                )
            )
        else:
            rows = marked(rows, data.run_id)
            parts.append(html_table(_records(rows.sort_values("host"), ["host"] + _own_columns(rows))))
    return "".join(parts)


def _categories(data: RunData, probe: str, section: probes.CategoryBars) -> str:
    frame = data.tables.get(f"{probe}.{section.table}")
    category = section.category
    if frame is None or category not in frame:
        return ""
    value = section.value if section.value in frame else default_metric(frame)
    parts = [f"<h2>{html.escape(section.title)}</h2>"]
    for checkpoint, rows in frame.groupby("checkpoint", sort=True):
        parts.append(f"<h3>{html.escape(str(checkpoint))}</h3>")
        bars = bar_labels(rows, within=(category,))
        parts.append(
            _img(
                plots.stacked_categories(
                    rows,
                    category=category,
                    value=value,
                    scale=section.scale,
                    unit=section.unit,
                    title=f"{checkpoint}: {value} by {category}",
                    labels=bars,
                ),
                f"{checkpoint} {section.table}",
            )
        )
        table = (
            rows.assign(_bar=bars).pivot_table(index=category, columns="_bar", values=value, aggfunc="sum")
            * section.scale
        )
        table = table.loc[table.sum(axis=1).sort_values(ascending=False).index]
        head = f"{category} ({section.table_unit})" if section.table_unit else category
        parts.append(
            html_table([{head: cat, **{str(h): v for h, v in vals.items()}} for cat, vals in table.iterrows()])
        )
    return "".join(parts)


def _advice(data: RunData) -> str:
    """Each carrier/profile job's `advice` (the measured variants ranked by speed-up), per host."""
    ok = data.shown
    items = []
    for _, job in ok.sort_values(["host", "checkpoint"]).iterrows():
        advice = json.loads(job["summary_json"] or "{}").get("advice") or []
        if advice:
            lines = "".join(f"<li>{html.escape(str(a))}</li>" for a in advice)
            items.append(f"<h3>{html.escape(f'{job.host} · {job.probe} {job.checkpoint}')}</h3><ol>{lines}</ol>")
    return "<h2>Advice: measured changes to the step, fastest first</h2>" + "".join(items) if items else ""


def _job_summaries(data: RunData) -> str:
    """Each probe's headline numbers, one column per job (host and checkpoint), one row per figure."""
    ok = data.shown
    parts = []
    for probe, rows in ok.groupby("probe", sort=True):
        columns: dict[str, dict[str, Any]] = {}
        for _, job in rows.sort_values(["checkpoint", "host"]).iterrows():
            summary = json.loads(job["summary_json"] or "{}")
            scalars = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
            scalars.update(wall_s=float(job["wall_s"]), note=job["reason"] or None)
            if job["run_id"] != data.run_id:
                scalars["run"] = f"earlier: {job['run_id']}"
            name = str(job["host"]) if rows["checkpoint"].nunique() == 1 else f"{job['host']} · {job['checkpoint']}"
            columns[name] = scalars
        keys = [
            k
            for k in dict.fromkeys(k for c in columns.values() for k in c)
            if any(c.get(k) is not None for c in columns.values())
        ]
        checkpoint = f" on {rows['checkpoint'].iloc[0]}" if rows["checkpoint"].nunique() == 1 else ""
        parts.append(
            f"<h3>{html.escape(str(probe) + checkpoint)}</h3>"
            + html_table([{"": k, **{n: c.get(k) for n, c in columns.items()}} for k in keys])
        )
    return "<h2>Job summaries per host</h2>" + "".join(parts) if parts else ""


def _other_tables(data: RunData) -> str:
    shown = _section_tables(data)
    parts = []
    for name, frame in data.tables.items():
        if name in shown:
            continue
        frame, priced = budget_hours_of(data, name, marked(frame, data.run_id))
        frame = frame.sort_values([c for c in ("checkpoint", "variant", "host") if c in frame], kind="stable")
        more = f' <span class="muted">(first {MAX_ROWS} of {len(frame)})</span>' if len(frame) > MAX_ROWS else ""
        columns = lead_columns(frame, ["checkpoint", *_own_columns(frame)])
        parts.append(
            f"<h3>{html.escape(name)}{more}</h3>{priced}" + html_table(_records(frame.head(MAX_ROWS), columns))
        )
    return "<h2>Other tables</h2>" + "".join(parts) if parts else ""


def _section_tables(data: RunData) -> set[str]:
    """The tables a probe's own section shows (a HostTables section: all of the probe's)."""
    shown = set()
    for probe in probes.REGISTRY:
        for section in probes.presentation(probe).sections:
            if isinstance(section, probes.HostTables):
                shown |= {n for n in data.tables if n.startswith(f"{probe}.")}
            else:
                shown.add(f"{probe}.{section.table}")
    return shown
