"""The training rates the store holds, per host and carrier, each with the job it stands on: what `labprobe
recommend` prices the lab's budget with (runner.analysis.recommend).

Every probe whose answer module declares `rates` (probes.rate: carrier's and profile's step rates, goodput's
and replay's rates on a corpus) is read the same way: the newest ok job of each slot (host, checkpoint,
config), the tables it names in `RATE_TABLES` for those jobs only, and its `rates(tables, summary, config)`.
Nothing here names a probe. Hours are never read from a row: a row's hours price its own job's budget.
"""

from __future__ import annotations

import dataclasses
import json
from types import ModuleType

import pandas as pd

import probes
from probes.rate import Rate
from runner.store.store import SLOT, Store

JOB_COLUMNS = [
    "run_id",
    "job_id",
    "probe",
    "host",
    "checkpoint",
    "status",
    "finished_at",
    "config_json",
    "summary_json",
]


@dataclasses.dataclass(frozen=True)
class Evidence:
    """A rate and the stored job it came from."""

    rate: Rate
    probe: str
    host: str
    carrier: str
    """The rate's model where the job measured several, else the job's checkpoint."""
    run_id: str
    job_id: str
    finished_at: str
    """`2026-12-04 12:47` (UTC)."""

    def cite(self) -> str:
        """`carrier run recorded-20261204T1247Z, 2026-12-04 12:47`."""
        return f"{self.probe} run {self.run_id}, {self.finished_at}"


def rate_probes() -> dict[str, ModuleType]:
    """Probe name -> its answer module, for every registered probe that declares `rates`."""
    found = {}
    for name in probes.REGISTRY:
        answer = probes.answer(name)
        if answer is not None and callable(getattr(answer, "rates", None)):
            found[name] = answer
    return found


def gather(store: Store, *, hosts: set[str] | None = None, checkpoints: set[str] | None = None) -> list[Evidence]:
    """Every rate of the newest ok job of every slot, of the hosts and checkpoints asked (all when None)."""
    names = set(store.table_names())
    found: list[Evidence] = []
    for probe, answer in rate_probes().items():
        if "jobs" not in names:
            break
        jobs = store.latest_jobs(probe, by=SLOT, columns=JOB_COLUMNS)
        if jobs.empty:
            continue
        keep = jobs["status"] == "ok"
        if hosts is not None:
            keep &= jobs["host"].isin(hosts)
        if checkpoints is not None:
            keep &= jobs["checkpoint"].isin(checkpoints)
        jobs = jobs[keep].reset_index(drop=True)
        if jobs.empty:
            continue
        tables = {t: store.read(f"{probe}.{t}", jobs=jobs) for t in answer.RATE_TABLES if f"{probe}.{t}" in names}
        for _, job in jobs.iterrows():
            found += _job_rates(probe, answer, job, tables)
    return found


def _job_rates(probe: str, answer: ModuleType, job: pd.Series, tables: dict[str, pd.DataFrame]) -> list[Evidence]:
    mine = {
        name: frame[(frame["job_id"] == job["job_id"]) & (frame["run_id"] == job["run_id"])].reset_index(drop=True)
        for name, frame in tables.items()
        if not frame.empty
    }
    rates = answer.rates(mine, _json(job.get("summary_json")), _json(job.get("config_json")))
    finished = pd.Timestamp(job["finished_at"])
    finished = finished.tz_convert("UTC") if finished.tzinfo else finished
    family = len({r.model for r in rates}) > 1  # a family's rows are named by model; else the store's checkpoint
    return [
        Evidence(
            rate=r,
            probe=probe,
            host=str(job["host"]),
            carrier=str(r.model if family and r.model else job["checkpoint"]),
            run_id=str(job["run_id"]),
            job_id=str(job["job_id"]),
            finished_at=finished.strftime("%Y-%m-%d %H:%M"),
        )
        for r in rates
    ]


def _json(text) -> dict:
    try:
        found = json.loads(text or "{}")
    except (TypeError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


def stored_work(store: Store) -> set[tuple[str, str, str]]:
    """(probe, host, checkpoint) of every rate probe's ok job stored: what a plan no longer needs to run."""
    names = set(store.table_names())
    if "jobs" not in names:
        return set()
    jobs = store.latest_jobs(by=SLOT, columns=["probe", "host", "checkpoint", "status"])
    if jobs.empty:
        return set()
    ok = jobs[(jobs["status"] == "ok") & jobs["probe"].isin(list(rate_probes()))]
    return set(zip(ok["probe"].astype(str), ok["host"].astype(str), ok["checkpoint"].astype(str), strict=True))


def hints() -> dict[str, tuple[str, str]]:
    """Probe -> (the basis of its rates, what measures one when none is stored), as each probe words it."""
    return {name: (answer.RATE_BASIS, answer.RATE_HINT) for name, answer in rate_probes().items()}


def planned_missing(
    cluster, stored: set[tuple[str, str, str]], *, hosts: set[str] | None = None, checkpoints: set[str] | None = None
) -> list[str]:
    """A line per plan, rate probe and host whose planned checkpoints have no ok job stored: `no profile of
    qwen3.5-0.8b on gx10: run `labprobe sweep --plan nightly``. GPU probes on hosts without a GPU are left
    out (they are skipped there). The first plan that would run a job names it."""
    wanted: dict[tuple[str, str, str], list[str]] = {}
    seen: set[tuple[str, str, str]] = set()
    for plan, entries in cluster.spec.plans.items():
        for entry in entries:
            if entry.probe not in rate_probes():
                continue
            on = list(cluster.hosts) if entry.hosts == "all" else entry.hosts
            of = list(cluster.checkpoints) if entry.checkpoints == "all" else entry.checkpoints
            for host in on:
                if (entry.probe in probes.GPU_PROBES and not cluster.hosts[host].gpus) or (hosts and host not in hosts):
                    continue
                for ckpt in of:
                    work = (entry.probe, host, ckpt)
                    if work in stored or work in seen or (checkpoints and ckpt not in checkpoints):
                        continue
                    seen.add(work)
                    wanted.setdefault((plan, entry.probe, host), []).append(ckpt)
    return [
        f"no {probe} of {', '.join(ckpts)} on {host}: run `labprobe sweep --plan {plan}`"
        for (plan, probe, host), ckpts in wanted.items()
    ]


HOURS = ("hours_per_job", "hours_sweep")
"""The hours columns probes store, each for its own job's budget: recomputed for the lab's at read time."""


def budget_hours(probe: str, table: str, rows: pd.DataFrame, budget) -> pd.DataFrame | None:
    """`rows` with HOURS recomputed for `budget` (runner.lab.budget.BudgetSpec) from each row's rate, as the
    probe's answer module reads it (`row_rates`); None where the probe gives no rate for that table."""
    answer = probes.answer(probe)
    reader = getattr(answer, "row_rates", None) if answer is not None else None
    found = reader(table, rows) if callable(reader) else None
    if found is None:
        return None
    per_job = (budget.tokens_per_job / found["real_tok_per_s"] + found["once_s"]) / 3600.0
    return rows.assign(hours_per_job=per_job, hours_sweep=per_job * budget.jobs)
