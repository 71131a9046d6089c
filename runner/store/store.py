"""The one store: every result, keyed by host and checkpoint, in Delta Lake tables.

Layout (runner.store.delta says where and how):

    <root>/tables/jobs/                  one row per finished job: status, reason, env, config
    <root>/tables/<probe>.<table>/       one Delta table per probe table, its rows
    <root>/artifacts/<job_id>/<run_id>/  raw evidence, plain files

`host` and `checkpoint` are columns (the rows are tiny: folders per host and checkpoint only made
tens of thousands of files). Every row carries the key columns (the fields of `JobKey`,
runner.store.rows, which builds the rows as stored).

Commits: each table of a job is one atomic commit, its artifacts are written next, and the job's row
is committed last: a job row is what commits a job. Readers read the jobs table first and keep a
table's rows only where their (job_id, run_id) has a job row, so a writer killed between commits
leaves nothing half-visible. Nothing committed is rewritten: appends only; compaction
(runner.store.maintain) writes new files and commits their swap for the old ones in one commit.

"The latest run of a job" is defined once, in runner.store.latest: the newest row by
(finished_at, run_id) per job_id (the sweep's done-set, the report) or per slot (compare).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from probes.result import InputError, ProbeResult, config_to_dict
from runner.store import artifacts, delta
from runner.store.delta import CorruptStoreError, StoreError
from runner.store.latest import JOB, ORDER, SLOT, latest, latest_indices, plain
from runner.store.nofollow import readable
from runner.store.root import StoreRoot
from runner.store.rows import JOB_COLUMNS, KEY_COLUMNS, STATUSES, JobKey, job_record, table_records

__all__ = [
    "JOB",
    "JOB_COLUMNS",
    "KEY_COLUMNS",
    "SLOT",
    "STATUSES",
    "CorruptStoreError",
    "JobKey",
    "Store",
    "StoreError",
    "job_record",
    "latest",
    "table_records",
]


_IDS = ["job_id", "run_id"]
PUSHDOWN_JOBS = 5000
"""Up to this many jobs given to `read`, their ids filter the table while it is read."""
FILTER_IDS = 500
"""Up to this many job ids asked about (`done_job_ids(among=...)`), DataFusion's bloom-filtered read;
past it a pyarrow filter (measured: DataFusion's IN list costs 0.02-0.1 ms an id, the pyarrow filter
~0.01 s a year of history whatever the plan's size; benchmarks/RESULTS.md)."""


class Store:
    def __init__(self, root: StoreRoot | str | Path, *, storage_options: dict[str, str] | None = None) -> None:
        """`root`: a StoreRoot (runner.cli.stores opens one per command), a directory or an object-store
        URL; `storage_options`: delta-rs's, for a URL (credentials and endpoints; unset, delta-rs reads
        the usual AWS_/GOOGLE_/AZURE_ variables)."""
        self.place = StoreRoot.of(root, storage_options)
        self.uri, self.local = self.place.uri, self.place.local
        self.root: Path | str = Path(self.uri) if self.local else self.uri
        self.storage_options = self.place.storage_options
        self._writers: dict[str, DeltaTable] = {}
        self._written: dict[tuple[str, str], set[str]] = {}  # (table, run_id) -> job ids stored
        self._layout_ok = False
        self._warned: set[str] = set()

    # -- where ---------------------------------------------------------------------------------
    def table_uri(self, name: str) -> str:
        return self.place.table(name)

    def table(self, name: str) -> DeltaTable | None:
        """Table `name` at its newest version; None when nothing was stored in it. A local store
        that does not exist, and a table whose log was lost (`lost_log`), are refused (InputError)."""
        self.require_root()
        self.check_layout()
        table = delta.open_table(self.table_uri(name), self.storage_options)
        if table is None:
            why = self.lost_log(name)
            if why:
                raise CorruptStoreError(f"store {self.uri}: table {name}: {why}")
        return table

    def require_root(self) -> None:
        """A reader of a local store that does not exist is told so (not "no results"); one of an object
        store that does not answer (a missing bucket, refused credentials) is told what the server said."""
        self.place.require_reachable()
        if self.local and not self.root.exists():
            raise InputError(f"store {self.root}: no such directory")
        if self.local and not self.root.is_dir():
            raise InputError(f"store {self.root}: is a file, not a store directory")

    def lost_log(self, name: str) -> str | None:
        """Why folder tables/<name> (no Delta log) is a table whose log was lost, or None: its data
        files hold rows of a committed job (a probe table), or of more than one job (the jobs
        table). Data files of a first commit killed before its log was written hold one job's rows,
        not committed: those are a stray, skipped as before. Local stores only."""
        if not self.local:
            return None
        files = delta.data_files(self.root / delta.TABLES / name)
        pairs = delta.data_pairs(files) if files else set()
        if not pairs:
            return None
        if name == "jobs":
            lost = len(pairs) > 1
        else:
            jobs = self.table("jobs")
            ids = delta.read(jobs, columns=_IDS) if jobs is not None else None
            lost = ids is not None and not pairs.isdisjoint(zip(*(ids.column(c).to_pylist() for c in _IDS)))
        if not lost:
            return None
        return (
            f"its folder holds {len(files)} data file(s) with rows of committed jobs but no _delta_log: the "
            "log was lost, so its rows cannot be read (`labprobe store repair` rebuilds it from those files)"
        )

    def check_layout(self) -> None:
        """Refuse a store in the older hive layout (one Parquet file per job): migrate it first."""
        if self._layout_ok or not self.local:
            return
        from runner.store.migrate import legacy_tables

        if not (self.root / delta.TABLES).is_dir() and legacy_tables(self.root):
            raise InputError(
                f"store {self.root}: holds results in the older layout (a Parquet file per job): "
                f"run `labprobe store migrate --store {self.root}` once (the old files stay "
                f"until you remove them)"
            )
        self._layout_ok = True

    # -- writing -------------------------------------------------------------------------------
    def _append(self, name: str, key: JobKey, data: pa.Table) -> str:
        """One commit of one job's rows into table `name`; a (job, run) is stored at most once."""
        stored = self._stored(name, key.run_id)
        if key.job_id in stored:
            raise StoreError(
                f"{name}: job {key.job_id} of run {key.run_id} already stored; the store never rewrites a job"
            )
        uri = self.table_uri(name)
        # A table kept open across this process's writes: each commit then reads only the log's
        # new entries, not the whole snapshot again.
        target = self._writers.get(name) or delta.open_table(uri, self.storage_options)
        committed = delta.append(target or uri, data, self.storage_options)  # read again after another writer's change
        self._writers[name] = committed or delta.open_table(uri, self.storage_options)
        stored.add(key.job_id)
        return uri

    def _stored(self, name: str, run_id: str) -> set[str]:
        """Job ids of run `run_id` already in table `name` (read once per run, then kept up to date)."""
        if (name, run_id) not in self._written:
            table = (
                self.table(name)
                if self.local and self.root.is_dir()
                else delta.open_table(self.table_uri(name), self.storage_options)
            )
            ids: set[str] = set()
            if table is not None:
                rows = delta.read(table, columns=["job_id"], filters=pc.field("run_id") == run_id)
                ids = set(rows.column("job_id").to_pylist())
            self._written[(name, run_id)] = ids
        return self._written[(name, run_id)]

    def write_table(self, key: JobKey, table: str, rows: list[dict[str, Any]]) -> str | None:
        """One probe table of one job, one commit; None when there are no rows (nothing to write)."""
        if not rows:
            return None
        return self._append(f"{key.probe}.{table}", key, pa.Table.from_pylist(table_records(key, rows)))

    def write_job(
        self,
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
    ) -> str:
        """The job's row, one commit: once it is in, the job's tables count as stored."""
        row = job_record(
            key,
            status=status,
            reason=reason,
            started_at=started_at,
            wall_s=wall_s,
            summary=summary,
            config=config,
            env=env,
            plan=plan,
        )
        return self._append("jobs", key, pa.Table.from_pylist([row]))

    def write_rows(self, name: str, records: list[dict[str, Any]]) -> None:
        """Many jobs' records (from `table_records`/`job_record`) in one commit: bulk loads only
        (benchmarks, imports), which take on themselves the order (tables, then jobs) and the
        never-twice rule that write_table/write_job keep per job."""
        self.check_layout()
        delta.append(self.table_uri(name), pa.Table.from_pylist(records), self.storage_options)
        self._writers.pop(name, None)

    def write_artifacts(self, key: JobKey, files: dict[str, str]) -> str:
        """Raw evidence as plain files under artifacts/<job_id>/<run_id>/ (never rewritten)."""
        return artifacts.write(self, key.job_id, key.run_id, files)

    def write_result(
        self, key: JobKey, result: ProbeResult, *, started_at: datetime, wall_s: float, env: dict, plan: str = ""
    ) -> None:
        """Every table, the artifacts, then the job row last: an ok job row implies its tables."""
        for table in result.tables:
            self.write_table(key, table, result.records(table))
        if result.artifacts:
            self.write_artifacts(key, result.artifacts)
        failed = [c.name for c in result.checks if not c.ok]
        self.write_job(
            key,
            status="ok",
            reason=f"checks failed: {', '.join(failed)}" if failed else "",
            started_at=started_at,
            wall_s=wall_s,
            summary=result.summary,
            config=config_to_dict(result.config),
            env=env,
            plan=plan,
        )

    # -- reading -------------------------------------------------------------------------------
    def table_names(self) -> list[str]:
        """Every table stored ("jobs" and "<probe>.<table>"). A folder under tables/ that is not a
        Delta table (a stray) is skipped with one warning naming it; one whose log was lost
        (`lost_log`), or a file where a table's folder belongs, is refused: a reader would silently miss
        that table."""
        self.require_root()
        self.check_layout()
        names = []
        tables = self.place.join(delta.TABLES)
        for name in delta.list_dirs(tables, self.storage_options, self.local):
            shaped = delta.table_shaped(name)
            if shaped and delta.is_table(self.table_uri(name), self.storage_options):
                names.append(name)
            elif shaped and self.lost_log(name):
                raise CorruptStoreError(f"store {self.uri}: table {name}: {self.lost_log(name)}")
            else:
                self._warn(name, f"store {self.uri}: skipped {delta.TABLES}/{readable(name)}: not a store table")
        for name, why in self.misplaced():  # that table's rows would be silently missed
            raise CorruptStoreError(f"store {self.uri}: table {name}: {why}")
        return names

    def misplaced(self) -> list[tuple[str, str]]:
        """(name, why) of each file under tables/ standing where a table's folder belongs: `jobs`, or
        `<probe>.<table>` of a probe the jobs table holds jobs of (a stray `notes.txt` is not one).
        Every reader would silently miss that table's rows. Local stores only."""
        found = delta.not_folders(self.place.join(delta.TABLES), self.local)
        probes: set[str] | None = None
        out = []
        for name, what in found:
            if name != "jobs" and probes is None:
                try:
                    jobs = self.table("jobs")
                    probes = set(delta.read(jobs, columns=["probe"]).column("probe").to_pylist()) if jobs else set()
                except InputError:  # the jobs table is broken itself: said on its own
                    probes = set()
            if name == "jobs" or name.split(".", 1)[0] in (probes or set()):
                out.append((name, delta.not_a_folder(what)))
        return out

    def columns(self, name: str) -> list[str]:
        """Table `name`'s columns, from its log (no data read); empty when nothing is stored."""
        table = self.table(name)
        return [] if table is None else [f.name for f in table.schema().fields]

    def read(
        self, name: str, *, columns: list[str] | None = None, filters: Any = None, jobs: pd.DataFrame | None = None
    ) -> pd.DataFrame:
        """Table `name` ("jobs" or "<probe>.<table>") as a DataFrame; empty when nothing is stored.

        Rows of a job whose job row was never committed (the writer died between its tables and
        its job row) are left out. `jobs`: job rows (job_id, run_id at least) already read: only
        their rows are kept, so a caller reading several tables reads the jobs table once, first.
        `filters`: a pyarrow.dataset expression.
        """
        if name == "jobs":
            return self._read("jobs", columns=columns, filters=filters).to_pandas()
        if jobs is None:
            jobs = self._read("jobs", columns=_IDS).to_pandas()  # first: every job row seen has its tables in
        elif len(jobs) <= PUSHDOWN_JOBS:  # a few jobs (the newest per slot): filter while reading
            filters = _only(jobs, filters)
        wanted = None if columns is None else list(dict.fromkeys([*columns, *_IDS]))
        frame = self._read(name, columns=wanted, filters=filters).to_pandas()
        if not frame.empty:
            keep = pd.MultiIndex.from_frame(frame[_IDS]).isin(pd.MultiIndex.from_frame(jobs[_IDS]))
            frame = frame[keep].reset_index(drop=True)
        return frame if columns is None else frame[list(columns)]

    def _read(
        self,
        name: str,
        *,
        columns: list[str] | None = None,
        filters: Any = None,
        table: DeltaTable | None = None,
        dictionary: set[str] | None = None,
    ) -> pa.Table:
        """`table`: the table already opened (one snapshot for several reads); `dictionary`: see delta.read."""
        table = table or self.table(name)
        if table is None:
            names = list(columns or (JOB_COLUMNS if name == "jobs" else KEY_COLUMNS))
            return pa.table({c: pa.array([], pa.string()) for c in names})
        if columns is not None:
            have = {f.name for f in table.schema().fields}
            missing = [c for c in columns if c not in have]
            if missing:
                raise InputError(f"store {self.uri}: table {name} has no column {missing[0]!r}")
        schema = pa.schema(table.schema().to_arrow()) if dictionary else pa.schema([])
        strings = {c for c in dictionary or () if c in schema.names and pa.types.is_string(schema.field(c).type)}
        return delta.read(table, columns=columns, filters=filters, dictionary=strings or None)

    def jobs(self, *, columns: list[str] | None = None, probe: str | None = None) -> pd.DataFrame:
        return self.read("jobs", columns=columns, filters=None if probe is None else pc.field("probe") == probe)

    def latest_jobs(
        self, probe: str | None = None, *, by: tuple[str, ...] = JOB, columns: list[str] | None = None
    ) -> pd.DataFrame:
        """The latest run of each job (or slot: `by`=SLOT), of one probe or all (`latest`'s rule).
        Every row's keys are read; the JSON columns (most of the bytes) only for the latest rows."""
        table = self.table("jobs")
        have = [f.name for f in table.schema().fields] if table is not None else list(JOB_COLUMNS)
        wanted = have if columns is None else list(columns)
        first = list(dict.fromkeys([*by, *ORDER, *_IDS, *(c for c in wanted if not c.endswith("_json"))]))
        where = None if probe is None else pc.field("probe") == probe
        rows = self._read("jobs", columns=first, filters=where, table=table, dictionary=set(by) | {"status"})
        newest = plain(rows.take(latest_indices(rows, by))).to_pandas()
        rest = [c for c in wanted if c not in first]
        if rest and not newest.empty:
            more = self._read("jobs", columns=[*_IDS, *rest], filters=_only(newest, where), table=table)
            newest = newest.merge(more.to_pandas().drop_duplicates(_IDS), on=_IDS, how="left")
        newest = newest.reindex(columns=list(dict.fromkeys([*newest.columns, *rest])))  # none: empty columns
        newest = newest.sort_values(list(ORDER), kind="stable").reset_index(drop=True)
        return newest if columns is None else newest[list(dict.fromkeys([*columns, *by, *ORDER]))]

    def done_job_ids(self, among: Iterable[str] | None = None) -> set[str]:
        """Jobs whose latest run is ok: what a sweep skips. `among`: only these job ids are asked
        about (a sweep's plan), and only their rows are read: up to FILTER_IDS ids through
        DataFusion, whose reader skips every row group whose job_id bloom filter rules them all
        out, so a plan's answer costs the plan, not the history; a larger plan through a pyarrow
        filter, which reads every row's job_id (cheap) where an IN list of thousands costs more."""
        if self.local and not self.root.exists():
            return set()  # a sweep asks before its first write: nothing is done in a store not made yet
        self.table_names()  # a table whose log was lost refuses: its jobs are not done, whatever jobs says
        if among is None:
            newest = self.latest_jobs(columns=["job_id", "status"])
            return set(newest.loc[newest["status"] == "ok", "job_id"]) if not newest.empty else set()
        wanted = sorted(set(among))
        table = self.table("jobs")
        if table is None or not wanted:
            return set()
        columns = ["job_id", "status", *ORDER]
        if len(wanted) <= FILTER_IDS:
            rows = delta.read_ids(table, columns, wanted)
        else:
            rows = delta.read(table, columns=columns, filters=pc.field("job_id").isin(pa.array(wanted, pa.string())))
        newest = rows.take(latest_indices(rows, JOB))
        return set(newest.filter(pc.equal(newest.column("status"), "ok")).column("job_id").to_pylist())

    # -- upkeep ----------------------------------------------------------------------------------
    def compact(self) -> dict[str, dict[str, int]]:
        """Compact every table and checkpoint its log (after a sweep); a failure is a warning, not
        lost results: the rows are committed either way, only reads stay slower until it succeeds."""
        from runner.store.maintain import compact

        try:
            return compact(self)
        except (StoreError, CorruptStoreError, OSError, DeltaError) as exc:
            delta.log.warning(
                f"store {self.uri}: compaction failed ({delta._short(exc)}); run `labprobe store compact` later"
            )
            return {}

    def vacuum(self, retention_days: float) -> int:
        """After compact: delete the files no table version of the last `retention_days` needs (the
        ones compaction replaced, once they are that old); -> how many. Without it a year of nightly
        compaction keeps every replaced file (benchmarks/RESULTS.md). A failure is a warning."""
        from runner.store.maintain import vacuum

        try:
            done = vacuum(self, retention_days)
        except (StoreError, CorruptStoreError, OSError, DeltaError) as exc:
            delta.log.warning(
                f"store {self.uri}: vacuum failed ({delta._short(exc)}); run `labprobe store vacuum` later"
            )
            return 0
        if done.refused:
            path, why = done.refused[0]
            more = f" (and {len(done.refused) - 1} more)" if len(done.refused) > 1 else ""
            delta.log.warning(
                f"store {self.uri}: vacuum left {path} alone: {why}{more}; `labprobe store check` lists the links"
            )
        return sum(map(len, done.deleted.values()))

    def _warn(self, what: str, message: str) -> None:
        if what not in self._warned:
            self._warned.add(what)
            delta.log.warning(message)


def _only(jobs: pd.DataFrame, filters: Any = None) -> Any:
    """A read filter keeping (a superset of) these jobs' rows. The run_id range lets Parquet
    statistics skip row groups of older runs (compacted files keep commit order, and run ids
    begin with their UTC start), so reading the newest jobs' rows costs little however old the store."""
    if jobs.empty:
        return filters
    runs = jobs["run_id"].astype(str)
    only = (
        (pc.field("run_id") >= runs.min())
        & pc.field("run_id").isin(pa.array(runs.unique(), pa.string()))
        & pc.field("job_id").isin(pa.array(jobs["job_id"].astype(str).unique(), pa.string()))
    )
    return only if filters is None else filters & only
