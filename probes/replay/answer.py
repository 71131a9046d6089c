"""The `replay` probe's answer: its summary's first scalar figures (measured against predicted step time
over the corpus's real batch shapes); no table of its own is read (runner.analysis shows it). Its `rates`:
the real tokens a second each strategy's replayed steps measured, what `labprobe recommend` calls replayed."""

from __future__ import annotations

import pandas as pd

from probes import rate
from probes.result import plain, summary_answer

QUESTION, TABLES, EXACT, RATIO_OF, figures = summary_answer("replay")
RATE_BASIS = rate.CORPUS
"""The kind of rate `rates` gives (probes.rate)."""
RATE_TABLES = ("replay",)
RATE_HINT = "a replay of {checkpoint} on {host} (`labprobe probe replay`, a GPU) checks the priced batching"


def rates(tables: dict[str, pd.DataFrame], summary: dict, config: dict) -> list[rate.Rate]:
    """Each strategy's measured real tokens a second over its replayed steps, beside what was predicted."""
    stack = config.get("variant") or rate.BASELINE
    found = []
    replay = tables.get("replay")
    for _, r in (replay if replay is not None else pd.DataFrame()).iterrows():
        measured = rate.positive(r.get("measured_tok_per_s"))
        if measured is None or str(plain(r.get("status")) or "ok") != "ok":
            continue
        bucket = plain(r.get("bucket_size"))
        steps = plain(r.get("num_steps"))
        found.append(
            rate.Rate(
                basis=rate.CORPUS,
                real_tok_per_s=measured,
                stack=stack,
                shape=rate.batching_shape(plain(r.get("strategy")), bucket),
                corpus=rate.corpus_name(config),
                within_tolerance=True if stack == rate.BASELINE else None,
                replayed=True,
                predicted_tok_per_s=rate.positive(r.get("predicted_tok_per_s")),
                note=f"{steps} replayed steps" if steps else "replayed",
            )
        )
    return found
