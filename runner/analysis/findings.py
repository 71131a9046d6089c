"""The morning report's first section: what tonight's run found (presentation only).

Above them, when a GPU host kept its jobs from running, one line per host: first the hosts whose
GPUs could not be read (the sweep exited non-zero over them: someone has to look), then those that
stayed busy until the deadline ("gx10 busy all night: 4 GPU jobs not run": not an error, but the
night measured nothing there). Then three parts, before any raw table: the answer of each probe (a one-line
headline over its hosts and checkpoints, the probe's own (`Presentation.headline`), then the table of
runner.analysis.answers with its notes), what changed since the last run (drift alerts on timings, and
exact answers that differ from the previous run's), and what failed or was skipped, with the reason and,
where an earlier run has a value, which run it is.
"""

from __future__ import annotations

import html
from typing import Any

import pandas as pd

import probes
from probes.format import shown_pct
from runner.analysis.answers import (
    ProbeAnswers,
    section_notes,
    single_earlier_run,
    table_rows,
)
from runner.analysis.html_table import html_table
from runner.dispatch.placement import gpu_skip_kind


def findings_html(
    sections: list[ProbeAnswers], *, alerts: list[str], watched: list[str], problems: pd.DataFrame
) -> str:
    hosts = "".join(
        f'<div class="alert{" bad" if kind == "unreadable" else ""}">{html.escape(text)}</div>'
        for kind, text in gpu_host_findings(problems)
    )
    return "\n".join([hosts, _found(sections), _changed(sections, alerts, watched), _failed(sections, problems)])


def gpu_host_findings(problems: pd.DataFrame) -> list[tuple[str, str]]:
    """(kind, line) per GPU host whose jobs were skipped at the deadline: unreadable hosts first."""
    if problems.empty:
        return []
    skipped = problems[problems["status"] == "skipped"]
    per_host: dict[tuple[str, str], list[str]] = {}
    for job in skipped.itertuples(index=False):
        kind = gpu_skip_kind(str(job.reason))
        if kind is not None:
            per_host.setdefault((kind, str(job.host)), []).append(str(job.reason))
    lines = []
    for (kind, host), reasons in sorted(per_host.items(), key=lambda item: (item[0][0] != "unreadable", item[0][1])):
        jobs = f"{len(reasons)} GPU job{'s' if len(reasons) != 1 else ''} not run"
        what = "GPUs could not be read" if kind == "unreadable" else "busy all night"
        lines.append((kind, f"{host} {what}: {jobs} ({reasons[0]})"))
    return lines


def _found(sections: list[ProbeAnswers]) -> str:
    parts = ['<h2 id="findings">What this run found</h2>']
    if not sections:
        parts.append('<p class="muted">No probe ran in this run.</p>')
    for section in sections:
        parts.append(f"<h3>{html.escape(section.question)}</h3>")
        parts.append(f'<p class="headline">{html.escape(headline(section))}</p>')
        rows = table_rows(section)
        if rows:
            cells = [{k: _cell(k, v) for k, v in r.items()} for r in rows]
            classes = ["earlier" if str(r.get("measured", "")).startswith("earlier") else "" for r in rows]
            parts.append(html_table(cells, row_class=classes))
        notes = section_notes(section)
        if notes:
            parts.append('<ul class="notes">' + "".join(f"<li>{html.escape(n)}</li>" for n in notes) + "</ul>")
    return "".join(parts)


def _cell(column: str, value: Any) -> Any:
    """Ratios as `0.762x`; the rest as html_table formats it."""
    if column.startswith("ratio_to_") and isinstance(value, float):
        return f"{value:.3f}x"
    if column.endswith("_pct") and isinstance(value, float):
        return shown_pct(value)
    return value


def headline(section: ProbeAnswers) -> str:
    """One line over the section's hosts and checkpoints."""
    answered = [a for a in section.answers if a.figures]
    missing = len(section.answers) - len(answered)
    if not answered:
        return f"No value: {', '.join(sorted({a.outcome for a in section.answers}))} everywhere."
    rows = [r for a in answered for r in a.figures]
    failed = [
        f"{a.checkpoint} @ {a.host} ({a.figures[0]['checks'].removeprefix('failed: ')})"
        for a in answered
        if str(a.figures[0].get("checks", "ok")) != "ok"
    ]
    text = (probes.presentation(section.probe).headline or _generic)(rows)  # the probe's own line
    text += f" Checks failed: {'; '.join(failed)}." if failed else " Every check passed."
    earlier = sum(a.earlier for a in answered)
    if single_earlier_run(section):
        text += f" All from run {single_earlier_run(section)}, stored before this run."
    elif earlier:
        text += f" {earlier} of {len(answered)} from an earlier run."
    if missing:
        text += f" {missing} with no value."
    return text


def _generic(rows: list[dict]) -> str:
    return f"{len(rows)} answer(s)."


def _changed(sections: list[ProbeAnswers], alerts: list[str], watched: list[str]) -> str:
    changes = [f"{s.probe} {a.checkpoint} @ {a.host}: {c}" for s in sections for a in s.answers for c in a.changes]
    watched_text = html.escape("; ".join(watched) or "no timed table in this run")
    compared = sum(a.previous_run is not None for s in sections for a in s.answers)
    if not alerts and not changes:
        answers_said = (
            f"the {compared} answer(s) with an earlier ok run are unchanged"
            if compared
            else "no answer of this run has an earlier ok run to compare with"
        )
        return (
            '<h2>What changed since the last run</h2><p class="ok">Nothing: no drift alert, and '
            f"{answers_said}. Drift watched: {watched_text}.</p>"
        )
    items = "".join(f'<div class="alert">{html.escape(a)}</div>' for a in alerts + changes)
    return (
        f"<h2>What changed since the last run ({len(alerts)} drift alert(s), {len(changes)} changed "
        f'answer(s))</h2>{items}<p class="muted">Drift watched: {watched_text}.</p>'
    )


def _failed(sections: list[ProbeAnswers], problems: pd.DataFrame) -> str:
    if problems.empty:
        return '<h2>Failed and skipped jobs, failed checks</h2><p class="ok">Every job ran, and every check passed.</p>'
    shown = {(a.probe, a.host, a.checkpoint): a.run_id for s in sections for a in s.answers if a.earlier}
    rows = []
    for job in problems.itertuples(index=False):
        earlier = shown.get((job.probe, job.host, job.checkpoint))
        status = job.status if job.status != "ok" else "checks failed"  # ok: ran, but a check failed
        rows.append(
            {
                "status": status,
                "probe": job.probe,
                "host": job.host,
                "checkpoint": job.checkpoint,
                "reason": job.reason,
                "shown instead": f"run {earlier}" if earlier else None,
            }
        )
    return f"<h2>Failed and skipped jobs, failed checks ({len(rows)})</h2>" + html_table(
        rows, row_class=["bad" if r["status"] == "failed" else "" for r in rows]
    )
