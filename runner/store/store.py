"""The one Parquet store: every result, keyed by host and checkpoint.

Layout (hive-partitioned, so pyarrow.dataset, DuckDB and pandas read it directly):

    <root>/<probe>.<table>/host=<host>/checkpoint=<checkpoint>/<job_id>-<run_id>.parquet
    <root>/jobs/host=<host>/checkpoint=<checkpoint>/<job_id>-<run_id>.parquet
    <root>/artifacts/<job_id>/<run_id>/<name>

The file name carries the run id so a re-run (`--force`, a retry of a failed job) adds a file
and never rewrites one. Writes are atomic: a temp file whose name starts with '.' (which
pyarrow.dataset ignores) is renamed into place, so a process killed mid-write leaves nothing a
reader sees. `host` and `checkpoint` live in the path only, and come back as string columns. A
row column named like a key column is stored as `row_<name>`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from probes.result import ProbeResult, _jsonable, config_to_dict

KEY_COLUMNS = ("run_id", "job_id", "probe", "host", "checkpoint", "checkpoint_fp", "config_hash",
               "code_version", "finished_at")
JOB_COLUMNS = KEY_COLUMNS + ("status", "reason", "started_at", "wall_s", "summary_json",
                             "config_json", "env_json", "plan")
STATUSES = ("ok", "failed", "skipped")
PARTITIONING = ds.partitioning(pa.schema([("host", pa.string()), ("checkpoint", pa.string())]),
                             flavor="hive")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JobKey:
    """The key columns every stored row carries."""

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


class StoreError(RuntimeError):
    """A write that would rewrite an existing file: the store never rewrites."""


class Store:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- writing -------------------------------------------------------------------------------
    def file_path(self, name: str, *, host: str, checkpoint: str, job_id: str, run_id: str) -> Path:
        """Where table `name` keeps one job's rows (the key says it: no listing needed)."""
        return self.root / name / f"host={host}" / f"checkpoint={checkpoint}" / f"{job_id}-{run_id}.parquet"

    def _file(self, name: str, key: JobKey) -> Path:
        return self.file_path(name, host=key.host, checkpoint=key.checkpoint, job_id=key.job_id,
                              run_id=key.run_id)

    def _write(self, path: Path, table: pa.Table) -> Path:
        if path.exists():
            raise StoreError(f"{path}: already stored; the store never rewrites a file")
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        _publish(tmp, path)
        return path

    def _key_columns(self, key: JobKey) -> dict[str, Any]:
        row = dataclasses.asdict(key)
        del row["host"], row["checkpoint"]  # in the path
        return row

    def write_table(self, key: JobKey, table: str, rows: list[dict[str, Any]]) -> Path | None:
        """One probe table of one job; None when there are no rows (nothing to write)."""
        if not rows:
            return None
        keys = self._key_columns(key)
        # A row's own column named like a key (a probe's own `host`, say) must neither be
        # overwritten by the key nor shadow it: it is kept as `row_<name>`.
        data = [{**keys, **{(f"row_{k}" if k in KEY_COLUMNS else k): _cell(v) for k, v in row.items()}}
                for row in rows]
        name = f"{key.probe}.{table}"
        path = self._file(name, key)
        return self._write(path, pa.Table.from_pylist(data))

    def write_job(self, key: JobKey, *, status: str, reason: str = "", started_at: datetime,
                  wall_s: float, summary: dict, config: dict, env: dict, plan: str = "") -> Path:
        assert status in STATUSES, status
        row = {**self._key_columns(key), "status": status, "reason": reason,
               "started_at": started_at, "wall_s": float(wall_s),
               "summary_json": json.dumps(_jsonable(summary), sort_keys=True),
               "config_json": json.dumps(_jsonable(config), sort_keys=True),
               "env_json": json.dumps(_jsonable(env), sort_keys=True), "plan": plan}
        path = self._file("jobs", key)
        return self._write(path, pa.Table.from_pylist([row]))

    def write_artifacts(self, key: JobKey, files: dict[str, str]) -> Path:
        folder = self.root / "artifacts" / key.job_id / key.run_id
        folder.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            assert "/" not in name and not name.startswith("."), f"bad artifact name {name!r}"
            path = folder / name
            if path.exists():
                raise StoreError(f"{path}: already stored; the store never rewrites a file")
            tmp = folder / f".{name}.tmp-{os.getpid()}"
            tmp.write_text(text, encoding="utf-8")
            _publish(tmp, path)
        return folder

    def write_result(self, key: JobKey, result: ProbeResult, *, started_at: datetime, wall_s: float,
                     env: dict, plan: str = "") -> None:
        """Every table, the artifacts, then the job row last: an ok job row implies its tables."""
        for table in result.tables:
            self.write_table(key, table, result.records(table))
        if result.artifacts:
            self.write_artifacts(key, result.artifacts)
        failed = [c.name for c in result.checks if not c.ok]
        self.write_job(key, status="ok", reason=f"checks failed: {', '.join(failed)}" if failed else "",
                       started_at=started_at, wall_s=wall_s, summary=result.summary,
                       config=config_to_dict(result.config), env=env, plan=plan)

    # -- reading -------------------------------------------------------------------------------
    def table_names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and (p.name == "jobs" or "." in p.name) and not p.name.startswith("."))

    def read(self, name: str, *, columns: list[str] | None = None, filters: Any = None,
             jobs: pd.DataFrame | None = None) -> pd.DataFrame:
        """Table `name` ("jobs" or "<probe>.<table>") as a DataFrame; empty when nothing is stored.

        Rows of a job whose job row was never written (the writer died between its tables and
        its job row) are left out: a job row, written last, is what commits a result. `jobs`: the
        jobs table already read, so a caller reading several tables reads it once.
        """
        if name == "jobs":
            return self._read_files(name, columns=columns, filters=filters)
        ids = ["job_id", "run_id"]
        wanted = None if columns is None else list(dict.fromkeys([*columns, *ids]))
        frame = self._read_files(name, columns=wanted, filters=filters)
        if not frame.empty:
            if jobs is None:
                jobs = self._read_files("jobs", columns=ids)
            keep = pd.MultiIndex.from_frame(frame[ids]).isin(pd.MultiIndex.from_frame(jobs[ids]))
            frame = frame[keep].reset_index(drop=True)
        return frame if columns is None else frame[list(columns)]

    def _read_files(self, name: str, *, columns: list[str] | None = None, filters: Any = None) -> pd.DataFrame:
        folder = self.root / name
        if not folder.is_dir():
            return pd.DataFrame(columns=list(columns or (JOB_COLUMNS if name == "jobs" else KEY_COLUMNS)))
        dataset = ds.dataset(folder, format="parquet", partitioning=PARTITIONING)
        schemas = [f.physical_schema for f in dataset.get_fragments()]
        if not schemas:
            return pd.DataFrame(columns=list(columns or KEY_COLUMNS))
        # Rows written at different times may type a column differently (int vs null): unify.
        schema = pa.unify_schemas(schemas + [PARTITIONING.schema], promote_options="permissive")
        dataset = ds.dataset(folder, format="parquet", partitioning=PARTITIONING, schema=schema)
        table = dataset.to_table(columns=columns, filter=filters)
        return table.to_pandas()

    def jobs(self) -> pd.DataFrame:
        return self.read("jobs")

    def latest_jobs(self) -> pd.DataFrame:
        jobs = self.jobs()
        if jobs.empty:
            return jobs
        jobs = jobs.sort_values("finished_at", kind="stable")
        return jobs.drop_duplicates("job_id", keep="last").reset_index(drop=True)

    def done_job_ids(self) -> set[str]:
        latest = self.latest_jobs()
        if latest.empty:
            return set()
        return set(latest.loc[latest["status"] == "ok", "job_id"])


def _publish(tmp: Path, path: Path) -> None:
    """Move a finished temp file into place, failing (never overwriting) if `path` appeared meanwhile."""
    try:
        os.link(tmp, path)  # unlike rename, link refuses an existing target
    except FileExistsError:
        tmp.unlink()
        raise StoreError(f"{path}: already stored; the store never rewrites a file") from None
    except OSError:  # a filesystem without hard links: rename, after the check in the caller
        os.replace(tmp, path)
        return
    tmp.unlink()


def _cell(value: Any) -> Any:
    """Parquet cells: paths as strings, nested values as JSON text."""
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(_jsonable(value), sort_keys=True)
    return value
