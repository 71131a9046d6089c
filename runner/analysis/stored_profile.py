"""A host x checkpoint's step-time model from the store: the newest ok `profile` job's tables.

`profile_from_store` returns the tables goodput's step model reads (`fit`, `scaling`,
`padding_penalty`), in the shape of a `labprobe probe profile --json` result, so the probe sees
the same thing whether the profile comes from a file or from the store.
"""

from __future__ import annotations

import math
from typing import Any

import pyarrow.dataset as ds

from probes.result import InputError
from runner.store.store import KEY_COLUMNS, Store

TABLES = ("fit", "scaling", "padding_penalty")


def _plain(value: Any) -> Any:
    """Parquet/pandas gives NaN for a missing float and numpy scalars: JSON's null and plain values."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def profile_from_store(store: Store, *, host: str, checkpoint: str) -> dict[str, Any]:
    """{"source", "job_id", "tables": {...}} of the newest ok profile of `checkpoint` on `host`."""
    jobs = store.latest_jobs()
    if not jobs.empty:
        jobs = jobs[
            (jobs["probe"] == "profile")
            & (jobs["host"] == host)
            & (jobs["checkpoint"] == checkpoint)
            & (jobs["status"] == "ok")
        ]
    if jobs.empty:
        raise InputError(
            f"{store.root}: no ok profile of checkpoint {checkpoint!r} on host {host!r} in the store "
            f"(run `labprobe sweep` with a profile entry first)"
        )
    newest = jobs.sort_values("finished_at", kind="stable").iloc[-1]
    where = (ds.field("job_id") == newest["job_id"]) & (ds.field("run_id") == newest["run_id"])
    tables = {}
    for name in TABLES:
        frame = store.read(f"profile.{name}", filters=where)
        rows = frame.drop(columns=[c for c in (*KEY_COLUMNS, "host", "checkpoint") if c in frame]).to_dict("records")
        tables[name] = [{k: _plain(v) for k, v in row.items()} for row in rows]
    return {
        "source": f"store {store.root}: profile job {newest['job_id']} ({host}, {checkpoint}, {newest['finished_at']})",
        "job_id": newest["job_id"],
        "tables": tables,
    }
