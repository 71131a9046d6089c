"""A probe's result on a host x checkpoint, from the store: the newest ok job's tables, for a probe whose input
is another probe's result (`ProbeSpec.stored_inputs`: goodput prices its hours with a stored profile's fit and
a stored carrier's stacks).

`stored_result` returns the tables asked for in the shape of a `labprobe probe NAME --json` result, so the
probe sees the same thing whether its input comes from a file or from the store.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds

from probes.result import InputError
from runner.store.store import KEY_COLUMNS, Store


def _plain(value: Any) -> Any:
    """Parquet/pandas gives NaN for a missing float and numpy scalars: JSON's null and plain values."""
    if hasattr(value, "item") and callable(value.item):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value


def _newest_job(store: Store, probe: str, host: str, checkpoint: str):
    """The newest ok `probe` job of `checkpoint` on `host` (its row of the jobs table)."""
    if store.local and Path(store.root).exists() and not Path(store.root).is_dir():
        raise InputError(f"--store {store.root}: a file, not a store folder")  # else: "no ok profile", which misleads
    jobs = store.latest_jobs()
    if not jobs.empty:
        jobs = jobs[
            (jobs["probe"] == probe)
            & (jobs["host"] == host)
            & (jobs["checkpoint"] == checkpoint)
            & (jobs["status"] == "ok")
        ]
    if jobs.empty:
        raise InputError(
            f"{store.root}: no ok {probe} of checkpoint {checkpoint!r} on host {host!r} in the store "
            f"(run `labprobe sweep` with a {probe} entry first)"
        )
    return jobs.sort_values("finished_at", kind="stable").iloc[-1]


def stored_result(store: Store, probe: str, *, host: str, checkpoint: str, tables: tuple[str, ...]) -> dict[str, Any]:
    """{"source", "job_id", "config", "summary", "tables": {...}} of the newest ok `probe` of `checkpoint` on
    `host`, in the shape of its `--json` result (the tables asked for)."""
    newest = _newest_job(store, probe, host, checkpoint)
    where = (ds.field("job_id") == newest["job_id"]) & (ds.field("run_id") == newest["run_id"])
    found = {}
    for name in tables:
        frame = store.read(f"{probe}.{name}", filters=where)
        rows = frame.drop(columns=[c for c in (*KEY_COLUMNS, "host", "checkpoint") if c in frame]).to_dict("records")
        found[name] = [{k: _plain(v) for k, v in row.items()} for row in rows]
    return {
        "source": f"store {store.root}: {probe} job {newest['job_id']} ({host}, {checkpoint}, {newest['finished_at']})",
        "job_id": newest["job_id"],
        # the shape it measured at, and its card (`device`): goodput's stack_at_priced_shape and
        # stack_of_the_fits_step read them
        "config": _job_json(newest, "config_json"),
        "summary": _job_json(newest, "summary_json"),
        "tables": found,
    }


def _job_json(job, column: str) -> dict:
    """The jobs table's JSON object in `column` (config_json: the probe's config as it ran; summary_json: its
    summary), {} when it has none that reads."""
    try:
        found = json.loads(job.get(column) or "{}")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
