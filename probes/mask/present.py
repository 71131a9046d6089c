"""How the runner shows the `mask` probe: its headline, compare's default (the layers keeping the fast path).
The checks (fast path, band, packing) are the answer itself, shown per row."""

from __future__ import annotations

from probes import SUMMARY, Presentation


def headline(rows: list[dict]) -> str:
    slow = sum(r.get("lose_fast_path", "none") != "none" for r in rows)
    leaks = sum(r.get("cross_sequence", "none") != "none" for r in rows)
    return (
        f"{len(rows) - slow} of {len(rows)} keep the fast path on every full-attention layer; "
        f"{leaks} attend across packed sequences."
    )


PRESENTATION = Presentation(headline=headline, compare=((SUMMARY, "layers_fast_path"),), checks_are_answer=True)
