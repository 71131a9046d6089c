"""How the runner shows the `bucket` probe: its headline (the 90%-gain bucket and its diversity price), that
bucket size as compare's default, history's table and the report's sweep (pad fraction against bucket size)."""

from __future__ import annotations

from probes import SUMMARY, Presentation, SweepLines
from probes.format import span


def headline(rows: list[dict]) -> str:
    return (
        f"Buckets of {span(rows, 'bucket_size_90pct_gain')} samples win 90% of the global sort's gain "
        f"(padding {span(rows, 'pad_pct', '%')} against {span(rows, 'random_pad_pct', '%')} at random), "
        f"at {span(rows, 'sources_per_batch')} sources per batch instead of "
        f"{span(rows, 'random_sources_per_batch')}."
    )


PRESENTATION = Presentation(
    headline=headline,
    compare=((SUMMARY, "bucket_size_90pct_gain"),),
    history_table="sweep",
    plots=(
        SweepLines(table="sweep", x="bucket_size", y="pad_fraction", title="bucket: pad fraction against bucket size"),
    ),
    one_row_per_tokenizer=True,
)
