"""`labprobe recommend`'s text: a table of each host x carrier's hours for the budget (its best stack within
the numerics tolerance, and the faster one outside it, marked), the whole sweep where the budget names its
arms, what is missing, and the verdict line last. The figures are runner.analysis.recommend's."""

from __future__ import annotations

from runner.analysis.recommend import Price, Recommendation, hours_text
from runner.tables import format_table

NO_VERDICT = "verdict: none: no trustworthy figure within the numerics tolerance is stored (see what is missing)"


def trust_word(value: bool | None) -> str:
    return {True: "yes", False: "no", None: "unknown"}[value]


def _row(host: str, carrier: str, price: Price) -> dict:
    return {
        "host": host,
        "checkpoint": carrier,  # the carrier: named as compare and history name it
        "stack": price.stack,
        "numerics": price.pick,
        "h_per_job": round(price.hours_per_job, 3),
        "h_budget": round(price.hours_budget, 2),
        "real_tok_per_s": round(price.real_tok_per_s),
        "spread_pct": None if price.spread_pct is None else round(price.spread_pct, 2),
        "trust": trust_word(price.trustworthy),
        "replayed": "yes" if price.replayed else "no",
        "batching": price.batching,
        "evidence": "; ".join(f"{e['probe']} {e['run_id']} {e['finished_at']}" for e in price.evidence),
    }


def table_rows(rec: Recommendation) -> list[dict]:
    """A row per host x carrier's best price within the tolerance, and the faster one outside under it."""
    rows = []
    for p in rec.priced:
        rows += [_row(p.host, p.carrier, price) for price in (p.best, p.faster_outside) if price is not None]
    return rows


def render(rec: Recommendation, store_root) -> str:
    title = f"recommend: hours for the lab's budget, {rec.budget['describe']} ({rec.budget['jobs']} jobs); store {store_root}"
    rows = table_rows(rec)
    parts = [format_table(rows, title=title) if rows else f"{title}\n  no training rate stored"]
    if any(p.faster_outside for p in rec.priced):
        parts.append(
            "  numerics OUTSIDE tolerance / unknown: faster, but not vouched to train the same; not in the verdict"
        )
    for p in rec.priced:
        if p.best is not None and p.best.replayed:
            parts.append(f"  replayed: {p.carrier} on {p.host}, {p.best.stack}: {p.best.replayed}")
    for sweep in rec.sweeps:
        voices = ", ".join(f"{a} {hours_text(h)}" for a, h in sweep["hours_per_job"].items())
        parts.append(
            f"the budget's arms on {sweep['host']}: {hours_text(sweep['hours'])} "
            f"({rec.budget['seeds']} seeds x a job each of {voices})"
        )
    if rec.missing:
        parts.append("missing:\n" + "\n".join(f"  - {line}" for line in rec.missing))
    parts.append(rec.verdict or NO_VERDICT)
    return "\n".join(parts)
