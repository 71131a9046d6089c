"""The report's data: one run's jobs and rows from the store, the drift alerts its rows raise, each
probe's answers (runner.analysis.report renders them)."""

from __future__ import annotations

import dataclasses

import pandas as pd

from probes.result import InputError
from runner.analysis import answers, plots
from runner.analysis.answers import ProbeAnswers
from runner.analysis.drift import default_metric, describe_alert, drift_table, spread_column
from runner.store.store import JOB, Store, latest


@dataclasses.dataclass
class RunData:
    run_id: str
    jobs: pd.DataFrame
    """This run's job rows, the newest per job_id."""
    tables: dict[str, pd.DataFrame]
    """Every probe table's rows written by this run."""
    alerts: list[str]
    watched: list[str]
    """`table: metric` pairs drift was checked on."""
    answers: list[ProbeAnswers] = dataclasses.field(default_factory=list)
    """Each probe's answer per host x checkpoint (runner.analysis.answers)."""

    @property
    def colors(self) -> dict[str, str]:
        return plots.host_colors(self.jobs["host"].astype(str).unique().tolist())


def collect(store: Store, run_id: str, *, threshold_pct: float, max_spread_pct: float) -> RunData:
    """This run's jobs and rows, and the drift alerts its rows raise. A run with no jobs (a resumed
    sweep that found everything stored) gives an empty report that says so."""
    all_jobs = store.jobs()  # first: every table read after it holds these jobs' rows
    jobs = latest(all_jobs[all_jobs["run_id"] == run_id], JOB)
    tables, alerts, watched, histories = {}, [], [], {}
    for name in store.table_names():
        if name == "jobs":
            continue
        history = histories[name] = store.read(name, jobs=all_jobs)
        rows = history[history["run_id"] == run_id]
        if rows.empty:
            continue
        tables[name] = rows.reset_index(drop=True)
        metric = _watched_metric(rows)
        if metric is None:
            continue
        watched.append(f"{name}: {metric}")
        drift = drift_table(history, metric, threshold_pct=threshold_pct, max_spread_pct=max_spread_pct)
        for _, row in drift[(drift["run_id"] == run_id) & drift["alert"]].iterrows():
            alerts.append(describe_alert(row, metric, drift.attrs["by"]))
    found = answers.build(all_jobs, lambda name, runs: histories.get(name, pd.DataFrame()), run_id)
    return RunData(
        run_id=run_id, jobs=jobs.reset_index(drop=True), tables=tables, alerts=alerts, watched=watched, answers=found
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
