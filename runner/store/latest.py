""" "The latest run of a job", defined once (`latest`): the newest row by (finished_at, run_id) per
job_id (what the sweep's done-set and the report take), or per slot (probe, host, checkpoint,
config: what compare takes, where a re-fingerprinted checkpoint replaces its older runs).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["JOB", "ORDER", "SLOT", "latest", "latest_indices", "plain"]

JOB = ("job_id",)
"""A job: one probe x checkpoint fingerprint x host x config (runner.lab.plan's job_id)."""
SLOT = ("probe", "host", "checkpoint", "config_hash")
"""What compare fills: a checkpoint name on a host under one config, whatever its fingerprint."""
ORDER = ("finished_at", "run_id")
"""Newest last; run ids start with their UTC start time, so they break finished_at ties."""


def latest(jobs: pd.DataFrame, by: tuple[str, ...] = JOB) -> pd.DataFrame:
    """The latest run of each job (`by`=JOB) or slot (`by`=SLOT): its newest job row, oldest first."""
    if jobs.empty:
        return jobs.reset_index(drop=True)
    keys = pa.table({c: pa.array(jobs[c]) for c in (*by, *ORDER)})
    picked = jobs.iloc[latest_indices(keys, by).to_numpy()]
    return picked.sort_values(list(ORDER), kind="stable").reset_index(drop=True)


def latest_indices(rows: pa.Table, by: tuple[str, ...] = JOB) -> pa.Array:
    """Row numbers of `latest`'s rows, computed in Arrow (a year of job rows in tens of ms): sort by
    (group, finished_at, run_id), keep each group's last row. The group is one integer made of the
    `by` columns' dictionary codes: only equality matters for grouping."""
    if rows.num_rows == 0:
        return pa.array([], pa.uint64())
    group = pa.array(np.zeros(rows.num_rows, np.int64))
    for c in by:
        codes = _codes(rows.column(c)).cast(pa.int64())
        width = pc.max(codes).as_py() + 1 if len(codes) else 1
        group = pc.add(pc.multiply(group, width), codes)  # a few hundred slots: far from overflow
    keyed = pa.table({"group": group, **{c: rows.column(c) for c in ORDER}})
    order = pc.sort_indices(keyed, sort_keys=[(c, "ascending") for c in keyed.column_names])
    sorted_group = group.take(order)
    differs = pc.not_equal(sorted_group.slice(0, len(sorted_group) - 1), sorted_group.slice(1))
    return order.filter(pa.concat_arrays([differs, pa.array([True])]))  # each group's last row


def _codes(column: pa.ChunkedArray) -> pa.Array:
    if pa.types.is_dictionary(column.type):  # read as dictionary: its codes, once unified across chunks
        return column.unify_dictionaries().combine_chunks().indices
    column = column.combine_chunks()
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return pc.dictionary_encode(column).indices
    return column


def plain(rows: pa.Table) -> pa.Table:
    """Dictionary columns back to their values (pandas would make them categoricals)."""
    for i, field in enumerate(rows.schema):
        if pa.types.is_dictionary(field.type):
            rows = rows.set_column(i, field.name, pc.cast(rows.column(i), field.type.value_type))
    return rows
