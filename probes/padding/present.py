"""How the runner shows the `padding` probe: its headline (padding per batching strategy), the pad fraction
per strategy as compare's default, history's table and the report's bars (one per host)."""

from __future__ import annotations

from probes import GroupedBars, Presentation
from probes.format import span


def headline(rows: list[dict]) -> str:
    strategies = [k.removesuffix("_pad_pct") for k in rows[0] if k.endswith("_pad_pct")]
    pads = ", ".join(f"{s} {span(rows, s + '_pad_pct', '%')}" for s in strategies)
    truncated = span(rows, "truncated_samples")
    return f"Padding per strategy: {pads}" + (f"; truncated samples {truncated}." if truncated != "-" else ".")


PRESENTATION = Presentation(
    headline=headline,
    compare=(("strategies", "pad_fraction"),),
    history_table="strategies",
    plots=(
        GroupedBars(
            table="strategies",
            group="strategy",
            value="pad_fraction",
            title="padding: pad fraction per batching strategy, by host",
        ),
    ),
    one_row_per_tokenizer=True,
)
