"""The report's data: one run's jobs and rows from the store, the drift alerts its rows raise, each
probe's answers (runner.analysis.report renders them)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd

import probes
from probes.result import InputError
from runner.analysis import answers, plots
from runner.analysis.answers import ProbeAnswers
from runner.analysis.drift import default_metric, describe_alert, drift_table, spread_column
from runner.analysis.report_runs import Work, run_hosts, run_work
from runner.store.store import JOB, Store, latest


@dataclasses.dataclass
class RunData:
    run_id: str
    jobs: pd.DataFrame
    """This run's job rows, the newest per job_id (none for a rerun that found everything done)."""
    tables: dict[str, pd.DataFrame]
    """Every probe table's rows of the jobs the answers show: this run's, or, for work this run did
    not do ok (done before, failed, skipped), the newest ok earlier run's (their `run_id` says which)."""
    alerts: list[str]
    watched: list[str]
    """`table: metric` pairs drift was checked on."""
    answers: list[ProbeAnswers] = dataclasses.field(default_factory=list)
    """Each probe's answer per host x checkpoint (runner.analysis.answers)."""
    shown: pd.DataFrame = dataclasses.field(default_factory=pd.DataFrame)
    """The job rows whose figures the answers show (this run's and earlier runs'), oldest first."""
    night: str | None = None
    """Why the run's night went wrong, from its run record (runner.analysis.report_runs.night_line)."""
    recommendation: Any = None
    """`labprobe recommend`'s answer for the lab's budget (runner.analysis.recommend), when there is one."""
    budget: Any = None
    """The lab's budget (runner.lab.budget.BudgetSpec) every hours figure is priced for; None: none given."""

    @property
    def colors(self) -> dict[str, str]:
        hosts = [*self.jobs.get("host", []), *self.shown.get("host", [])]
        return plots.host_colors(sorted({str(h) for h in hosts}))


def collect(
    store: Store, run_id: str, *, threshold_pct: float, max_spread_pct: float, work: list[Work] | None = None
) -> RunData:
    """This run's jobs, the rows of the jobs its answers show, and the drift alerts its rows raise.
    `work`: what the run planned (the sweep's jobs); by default the run's record, else its own jobs.
    A rerun that found everything stored shows the stored answers it relied on, each with its run."""
    all_jobs = store.jobs()  # first: every table read after it holds these jobs' rows
    jobs = latest(all_jobs[all_jobs["run_id"] == run_id], JOB)
    work = work if work is not None else run_work(store, run_id)
    tables, alerts, watched, histories = {}, [], [], {}
    names = [n for n in store.table_names() if n != "jobs"]
    for name in names:
        histories[name] = store.read(name, jobs=all_jobs)
    found = answers.build(
        all_jobs,
        lambda name, runs: histories.get(name, pd.DataFrame()),
        run_id,
        work=work,
        host_order=run_hosts(store, run_id),  # the sweep's baseline host, as its end-of-run text had it
    )
    shown = _shown_jobs(all_jobs, found)
    for name in names:
        history = histories[name]
        rows = _rows_of(history, shown)
        if rows.empty:
            continue
        tables[name] = rows
        mine = history[history["run_id"] == run_id]
        metric = _watched_metric(mine) if not mine.empty else None
        if metric is None:
            continue
        watched.append(f"{name}: {metric}")
        drift = drift_table(history, metric, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct)
        for _, row in drift[(drift["run_id"] == run_id) & drift["alert"]].iterrows():
            alerts.append(describe_alert(row, metric, drift.attrs["by"]))
    return RunData(
        run_id=run_id,
        jobs=jobs.reset_index(drop=True),
        tables=tables,
        alerts=alerts,
        watched=watched,
        answers=found,
        shown=shown,
    )


def _shown_jobs(jobs: pd.DataFrame, found: list[ProbeAnswers]) -> pd.DataFrame:
    """The ok job row behind each answer shown: (work, run) as the answer names it, the newest."""
    wanted = {
        (a.probe, a.host, checkpoint, config_hash, a.run_id)
        for s in found
        for a in s.answers
        if a.run_id
        for checkpoint, config_hash in (a.merged or ((a.checkpoint, a.config_hash),))
    }
    if jobs.empty or not wanted:
        return jobs.iloc[0:0]
    ok = jobs[jobs["status"] == "ok"]
    keys = pd.MultiIndex.from_frame(ok[[*answers.WORK_KEY, "run_id"]].astype(str))
    picked = ok[keys.isin(list(wanted))]
    return latest(picked, answers.WORK_KEY).reset_index(drop=True)


def _rows_of(history: pd.DataFrame, shown: pd.DataFrame) -> pd.DataFrame:
    if history.empty or shown.empty:
        return history.iloc[0:0]
    pairs = pd.MultiIndex.from_frame(shown[["job_id", "run_id"]].astype(str))
    return history[pd.MultiIndex.from_frame(history[["job_id", "run_id"]].astype(str)).isin(pairs)].reset_index(
        drop=True
    )


def _watched_metric(rows: pd.DataFrame) -> str | None:
    try:
        metric = default_metric(rows)
    except InputError:
        return None
    return metric if spread_column(rows.columns, metric) else None


def problems(jobs: pd.DataFrame) -> pd.DataFrame:
    """Failed and skipped jobs, and ok jobs with a reason (a probe check that failed), worst first."""
    bad = jobs[(jobs["status"] != "ok") | (jobs["reason"].fillna("") != "")].copy()
    bad["order"] = bad["status"].map({"failed": 0, "skipped": 1, "ok": 2})
    return bad.sort_values(["order", "probe", "host", "checkpoint"], kind="stable").drop(columns="order")


def gpu_waits(jobs: pd.DataFrame) -> list[dict[str, Any]]:
    """Each GPU job of the run: the card it ran on, how long it waited for a foreign process to leave a card
    (its row's env `gpu_wait_s`, counted from when a slot of its host was free of labprobe's own work) and
    why (`gpu_wait_reason`); a job skipped before any card was read says so in its reason."""
    found = []
    for _, job in jobs.sort_values(["host", "probe", "checkpoint"], kind="stable").iterrows():
        try:
            env = json.loads(job.get("env_json") or "{}")
        except (TypeError, ValueError):
            env = {}
        reason = str(job["reason"] or "")
        # A job skipped while it waited says so in its reason; one never placed on a card (a host without a
        # GPU), or stored before jobs recorded their wait, has nothing to say here.
        waited_skip = job["probe"] in probes.GPU_PROBES and job["status"] != "ok" and "waited" in reason
        if "gpu_wait_s" not in env and not waited_skip:
            continue
        card = f"GPU {env['gpu_index']} ({env.get('gpu_uuid', '')})" if env.get("gpu_index") not in (None, "") else ""
        waited = env.get("gpu_wait_s")
        found.append(
            {
                "host": str(job["host"]),
                "probe": str(job["probe"]),
                "checkpoint": str(job["checkpoint"]),
                "status": str(job["status"]),
                "card": card or "-",
                "waited_s": float(waited) if waited not in (None, "") else None,
                "why": env.get("gpu_wait_reason")
                or (str(job["reason"] or "") if job["status"] != "ok" else "")
                or "none recorded",
            }
        )
    return found
