"""Plain-text tables for the terminal. Presentation only: probes never print."""

from __future__ import annotations

from typing import Any, Iterable

from probes.format import format_value  # one formatting for the runner and the probes' headlines

__all__ = ["format_table", "format_value"]


def format_table(rows: Iterable[dict[str, Any]], title: str | None = None) -> str:
    rows = list(rows)
    if not rows:
        return f"{title}: (no rows)" if title else "(no rows)"
    columns = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[format_value(r.get(c)) for c in columns] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    numeric = [
        all(isinstance(r.get(c), (int, float)) and not isinstance(r.get(c), bool) for r in rows if r.get(c) is not None)
        for c in columns
    ]

    def line(values):
        return "  ".join(v.rjust(w) if n else v.ljust(w) for v, w, n in zip(values, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(columns), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)
