"""Rows as the store keeps them: the key columns every row carries (`JobKey`), a probe table's
rows and a job's row built from a job's key and its result.

A row column named like a key column is stored as `row_<name>`. A new column merges into its
table's schema and older rows read null there, so adding a key column is adding a field to `JobKey`.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from probes.result import to_jsonable

__all__ = ["JOB_COLUMNS", "KEY_COLUMNS", "STATUSES", "JobKey", "job_record", "table_records"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobKey:
    """The key columns every stored row carries (a new field here is a new key column everywhere)."""

    run_id: str
    job_id: str
    probe: str
    host: str
    checkpoint: str
    checkpoint_fp: str
    config_hash: str
    code_version: str
    finished_at: datetime

    def __post_init__(self) -> None:
        for name in ("host", "checkpoint", "job_id", "run_id"):
            value = getattr(self, name)
            assert value and "/" not in value and not value.startswith("."), f"bad {name} {value!r}"


KEY_COLUMNS = tuple(f.name for f in dataclasses.fields(JobKey))
JOB_COLUMNS = KEY_COLUMNS + (
    "status",
    "reason",
    "started_at",
    "wall_s",
    "summary_json",
    "config_json",
    "env_json",
    "plan",
)
STATUSES = ("ok", "failed", "skipped")


def table_records(key: JobKey, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A probe table's rows as stored: the key columns, then the row's own (a row column named like
    a key, a probe's own `host` say, neither overwrites nor shadows it: it is kept as `row_<name>`)."""
    keys = dataclasses.asdict(key)
    return [{**keys, **{(f"row_{k}" if k in KEY_COLUMNS else k): _cell(v) for k, v in row.items()}} for row in rows]


def job_record(
    key: JobKey,
    *,
    status: str,
    reason: str = "",
    started_at: datetime,
    wall_s: float,
    summary: dict,
    config: dict,
    env: dict,
    plan: str = "",
) -> dict[str, Any]:
    """A job row as stored."""
    assert status in STATUSES, status
    return {
        **dataclasses.asdict(key),
        "status": status,
        "reason": reason,
        "started_at": started_at,
        "wall_s": float(wall_s),
        "summary_json": json.dumps(to_jsonable(summary), sort_keys=True),
        "config_json": json.dumps(to_jsonable(config), sort_keys=True),
        "env_json": json.dumps(to_jsonable(env), sort_keys=True),
        "plan": plan,
    }


def _cell(value: Any) -> Any:
    """Parquet cells: paths as strings, nested values as JSON text."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(to_jsonable(value), sort_keys=True)
    return value
