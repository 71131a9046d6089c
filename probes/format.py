"""Numbers as people read them: one place for the terminal's tables, the report and each probe's headline.

It sits at the door (probes/) because both sides format: a probe's presentation (`probes.<name>.present`)
writes its headline with these, and the runner's tables and report print with them. Presentation only.
"""

from __future__ import annotations

import math
from typing import Any


def format_value(value: Any) -> str:
    """A cell: 1,234 for an integer, 0.3996 or 136.2 for a float, 1.234e+08 or 4.000e-04 at the extremes."""
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            return "nan"
        if value != 0 and (abs(value) >= 1e7 or abs(value) < 1e-3):
            return f"{value:.3e}"
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 100 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def shown_pct(value: float) -> float:
    """A percentage as printed: three significant digits below 10 (3.12, 0.336), one decimal above."""
    return float(f"{value:.3g}") if abs(value) < 10 else round(value, 1)


def short(value: float) -> str:
    """136, 4,307 (no decimals a headline does not need), 0.3996."""
    return f"{value:,.0f}" if float(value).is_integer() or abs(value) >= 100 else format_value(float(value))


def span(rows: list[dict], key: str, unit: str = "") -> str:
    """The range of `key` over the rows that hold a number there, for a headline: `3.1-4.2%`, `136` or `-`."""
    values = [r[key] for r in rows if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]
    if not values:
        return "-"
    if unit == "%":
        values = [shown_pct(float(v)) for v in values]
    lo, hi = short(min(values)), short(max(values))
    return f"{lo}{unit}" if lo == hi else f"{lo}-{hi}{unit}"
