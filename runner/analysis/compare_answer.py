"""`labprobe compare --table answer`: a figure of each job's answer, worded as the end of a sweep and the
report word it (runner.analysis.answers), side by side per host. A text figure (mask's `full_fast_path`:
`5 of 5 (not flash: head_dim 512, efficient kernel)`) is compared as it is: the same words on every host, or a
warning naming the hosts that answer otherwise."""

from __future__ import annotations

import pandas as pd

from runner.analysis.answers import WORK_KEY, answers
from runner.store.store import Store

KEYS = ("run_id", "job_id", "probe", "host", "checkpoint", "checkpoint_fp", "config_hash")


def answer_rows(store: Store, jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per answer row of each job (its figures, then the job's key columns)."""
    work = list(jobs[list(WORK_KEY)].itertuples(index=False, name=None))
    keyed = {tuple(j[k] for k in WORK_KEY[1:]): j for _, j in jobs.iterrows()}
    records = []
    for section in answers(store, run_id="", work=work):
        for answer in section.answers:
            job = keyed[(answer.host, answer.checkpoint, answer.config_hash)]
            records += [{**figure, **{k: job[k] for k in KEYS}} for figure in answer.figures]
    return pd.DataFrame(records)


def text_cells(rows: pd.DataFrame, metric: str, dims: list[str], hosts: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """compare's cells for a text figure: each host's words (several rows: their distinct words, joined), and a
    warning per group whose hosts word it differently (an exact answer should not differ by host)."""
    keys = ["checkpoint", *dims, "host"]
    cells = (
        rows.assign(_words=rows[metric].map(lambda v: "-" if v is None or v != v else str(v)))
        .groupby(keys, sort=False, dropna=False)["_words"]
        .agg(median=lambda words: "; ".join(dict.fromkeys(words)), count="count")
        .reset_index()
        .sort_values(["checkpoint", *dims], kind="stable")
    )
    cells["group"] = (
        [
            " ".join(f"{d}={'-' if pd.isna(v) else v}" for d, v in zip(dims, vals, strict=True))
            for vals in cells[dims].itertuples(index=False)
        ]
        if dims
        else ""
    )
    cells["untrusted"] = False
    warnings = []
    for (ckpt, group), part in cells.groupby(["checkpoint", "group"], sort=False):
        if part["median"].nunique() > 1:
            words = dict(zip(part["host"], part["median"], strict=True))
            said = "; ".join(f"{h}: {words[h]}" for h in hosts if h in words)
            where = f"checkpoint {ckpt}" + (f" {group}" if group else "")
            warnings.append(f"{where}: hosts answer {metric} differently ({said})")
    return cells, warnings
