"""How the runner shows the `carrier` probe: its headline (tok/s and how many rows are trustworthy), tok/s as
compare's default, history's table, and the report's section: per checkpoint, each host's rows and bar charts
of throughput, step time, peak memory and MFU."""

from __future__ import annotations

from probes import HostTables, Presentation
from probes.format import span

BAR_METRICS = (
    ("tok_per_s", "tokens/s", 1.0),
    ("step_s", "s/step", 1.0),
    ("peak_mem_bytes", "peak memory, GiB", 1 / 2**30),
    ("mfu_vs_datasheet_peak", "MFU (datasheet peak)", 1.0),
    ("mfu", "MFU", 1.0),
)
"""`mfu` is the column's name in rows stored before MFU was named by its peak."""
MEASURED_MFU = ("mfu_vs_measured_peak", "MFU (measured peak: a card without a datasheet figure)", 1.0)
"""Drawn too when some host's card has no datasheet peak (probes.step.measure.peaks): its MFU is not left blank."""
FACTS = ("params_total", "params_trainable", "tokens_per_step")
"""Properties of the carrier and its config, not measurements: said once above its table."""


def headline(rows: list[dict]) -> str:
    rated = [r for r in rows if isinstance(r.get("tok_per_s"), (int, float))]
    untrusted = sum(not str(r.get("trust", "")).startswith("yes") for r in rows)
    if not rated:
        return "No throughput measured."
    return f"tok/s {span(rated, 'tok_per_s')}; {untrusted} of {len(rows)} rows not (yet) trustworthy."


def bar_metrics(rows) -> list[tuple[str, str, float]]:
    """The bars to draw: BAR_METRICS the rows have, and MFU against the measured peak where some host's card
    has no datasheet figure (a card not in probes' peak table: its MFU would be blank)."""
    import pandas as pd  # the report's rows; `labprobe probe` never draws

    names = [c for c, _, _ in BAR_METRICS] + [MEASURED_MFU[0]]
    known = {c: pd.to_numeric(rows[c], errors="coerce") for c in names if c in rows}
    metrics = [(c, label, scale) for c, label, scale in BAR_METRICS if c in known and known[c].notna().any()]
    measured = known.get(MEASURED_MFU[0])
    sheet = known.get("mfu_vs_datasheet_peak")
    if measured is not None and (sheet is None or (sheet.isna() & measured.notna()).any()):
        metrics.append(MEASURED_MFU)
    return metrics


PRESENTATION = Presentation(
    headline=headline,
    compare=(("carriers", "tok_per_s"),),
    history_table="carriers",
    sections=(HostTables(title="Carriers: per-host comparison", facts=FACTS, bar_metrics=bar_metrics),),
)
