"""What the morning report leads with (presentation only): the night's failure when it had one, the lab's
question answered for its budget (`labprobe recommend`'s verdict and figures), and how long each GPU job
waited for its card and why."""

from __future__ import annotations

import html

from runner.analysis.html_table import html_table
from runner.analysis.recommend_text import NO_VERDICT, table_rows
from runner.analysis.report_data import RunData, gpu_waits


def night_html(data: RunData) -> str:
    return f'<p class="alert"><b>{html.escape(data.night)}</b></p>' if data.night else ""


def question_html(data: RunData) -> str:
    """The verdict in one line, then each host x carrier's hours for the budget and what is missing."""
    rec = data.recommendation
    if rec is None:
        return ""
    verdict = rec.verdict or NO_VERDICT
    parts = [
        f"<h2>The lab's question: hours for the budget ({html.escape(rec.budget['describe'])})</h2>",
        f'<p class="{"ok" if rec.verdict else "alert"}"><b>{html.escape(verdict)}</b></p>',
    ]
    rows = table_rows(rec)
    if rows:
        parts.append(html_table(rows, row_class=["" if r["numerics"] == "within tolerance" else "bad" for r in rows]))
        parts.append(
            '<p class="muted">Shaded: faster, outside the numerics tolerance or with none measured: not the '
            "same training, never the verdict. Hours are priced at read time from each figure's rate.</p>"
        )
    if rec.missing:
        items = "".join(f"<li>{html.escape(line)}</li>" for line in rec.missing)
        parts.append(f'<h3>Missing</h3><ul class="notes">{items}</ul>')
    return "".join(parts)


def gpu_waits_html(data: RunData) -> str:
    """Each GPU job's card, its wait for a foreign process to leave a card (from when a slot of its host
    was free of labprobe's own work), and why."""
    waits = gpu_waits(data.jobs)
    if not waits:
        return ""
    return "<h2>GPU jobs: the card each ran on, how long it waited, and why</h2>" + html_table(
        waits, row_class=["" if w["status"] == "ok" else "bad" for w in waits]
    )
