"""HTML tables for the morning report (presentation only): one function, the report's style sheet."""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Any

import pandas as pd

from runner.tables import format_value

SPAN = "__span__"
"""A row holding this key renders as its first column, then this text across the rest."""

CSS = """
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
.headline{font-size:14px;margin:4px 0} .earlier td{background:#fffbe6} ul.notes{font-size:12.5px;margin:4px 0 12px}
details{margin-top:32px;border-top:1px solid #ddd;padding-top:8px} summary{font-size:16px;font-weight:600;cursor:pointer}
"""


def html_table(rows: Iterable[dict[str, Any]], *, row_class: Iterable[str] | None = None) -> str:
    rows = list(rows)
    if not rows:
        return '<p class="muted">(no rows)</p>'
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
    return f'<div class="wide"><table><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>'


def _is_missing(value: Any) -> bool:
    try:
        return value is None or bool(pd.isna(value))
    except (TypeError, ValueError):
        return False
