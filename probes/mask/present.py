"""How the runner shows the `mask` probe: its headline, compare's default (its answer's full layers keeping the
fast path, worded as the sweep's table words them).
The checks (fast path, band, packing) are the answer itself, shown per row."""

from __future__ import annotations

from probes import ANSWER, Presentation


def headline(rows: list[dict]) -> str:
    slow = sum(r.get("lose_fast_path", "none") != "none" for r in rows)
    leaks = sum(r.get("cross_sequence", "none") != "none" for r in rows)
    return (
        f"{len(rows) - slow} of {len(rows)} keep the fast path on every full-attention layer; "
        f"{leaks} attend across packed sequences."
    )


PRESENTATION = Presentation(headline=headline, compare=((ANSWER, "full_fast_path"),), checks_are_answer=True)
