"""Which runs a report can be drawn for, and what work each relied on.

A sweep stores a job row only for what it ran: a rerun whose jobs were all done stores none, yet its
answers are the stored ones it skipped to. So every sweep also leaves `<store>/runs/<run_id>.json`:
its plan and its work (probe, host, checkpoint, config hash per planned job). `labprobe report --run
ID` takes the work from there; for a run without that record (an older store) the work is the run's
own jobs. On an object store the record is an object (runner.store.root builds its path).

`--night DATE`: the runs started from noon of DATE to noon of the next day, local time (a night's
sweep, and a resumed one); the report is the last one's, which shows the others' answers as stored.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import date, datetime, time, timedelta, timezone

import pandas as pd

from probes.result import InputError, loads
from runner.store.root import RUNS

_RUN_ID = re.compile(r"^(\d{8}T\d{6}Z)-[0-9a-z]+$")
Work = tuple[str, str, str, str]
"""(probe, host, checkpoint, config_hash): what answers.WORK_KEY names."""


RUNNING = "running"
OK = "ok"
OUTCOMES = (RUNNING, OK, "failed", "incomplete", "interrupted", "died")
"""A run record's `outcome`: `running` from its start until the sweep records its end (a record left
`running` with no sweep holding the lock died without a word: killed, or its machine went down)."""


def write_run(
    store, run_id: str, *, plan: str, work: list[Work], hosts: list[str] | None = None, outcome: str = RUNNING
) -> str | None:
    """Record a sweep's plan and work, and that it is running (-> where, or None). A record that cannot be
    written is a warning: the sweep's results matter more than its report."""
    record = {"run_id": run_id, "plan": plan, "work": [list(w) for w in dict.fromkeys(work)]}
    if hosts:  # the cluster's host order: the report's baseline host is the sweep's
        record["hosts"] = list(hosts)
    record |= {"started_at": _now(), "outcome": outcome, "reason": ""}
    return _write(store, run_id, record)


def end_run(store, run_id: str, outcome: str, reason: str = "") -> str | None:
    """The run's end in its record: `ok`, or what went wrong with the night (`failed`: the cluster could not
    be reached, the store stopped taking results, jobs failed; `incomplete`: the deadline passed; `died`,
    `interrupted`). A run without a record (an older sweep's) gets one naming no work."""
    assert outcome in OUTCOMES, outcome
    try:
        record = _record(store, run_id)
    except (ValueError, InputError):
        record = None
    record = record if isinstance(record, dict) else {"run_id": run_id, "work": []}
    record |= {"outcome": outcome, "reason": reason, "ended_at": _now()}
    return _write(store, run_id, record)


def night_line(store, run_id: str, running: dict | None = None) -> str | None:
    """The line `report` and `status` lead with when the run's night went wrong; None when it ended ok, is
    still running (`running`: the lock holder's info), or left no word (an older record)."""
    try:
        record = _record(store, run_id) or {}
    except (ValueError, InputError):
        return None
    if not isinstance(record, dict):
        return None
    outcome, reason = record.get("outcome"), str(record.get("reason") or "")
    if outcome in (None, OK) or (outcome == RUNNING and (running or {}).get("run_id") == run_id):
        return None
    if outcome == RUNNING:
        outcome, reason = "died", "it ended without recording its end (killed, or its machine went down)"
    when = f", started {str(record.get('started_at'))[:16].replace('T', ' ')} UTC" if record.get("started_at") else ""
    plan = f"plan {record.get('plan')!r}" if record.get("plan") else "plan not recorded"
    return f"run {run_id} ({plan}{when}) {outcome.upper()}: {reason or 'no reason recorded'}"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _write(store, run_id: str, record: dict) -> str | None:
    rel = store.place.run_record(run_id)
    try:
        return store.place.write_text(rel, json.dumps(record) + "\n")
    except OSError as exc:
        where = store.place.join(rel)
        logging.getLogger("labprobe").warning(f"{where}: run record not written ({exc}); its report shows its own jobs")
        return None


def _record(store, run_id: str) -> dict | None:
    """The run record of `run_id` as stored, None when there is none (ValueError: not JSON)."""
    text = store.place.read_text(store.place.run_record(run_id))
    return None if text is None else loads(text)


def run_hosts(store, run_id: str) -> list[str] | None:
    """The host order the sweep of `run_id` used (its cluster's), when its record says it."""
    try:
        hosts = (_record(store, run_id) or {}).get("hosts")
    except (ValueError, AttributeError, InputError):
        return None
    return [str(h) for h in hosts] if isinstance(hosts, list) else None


def run_work(store, run_id: str) -> list[Work] | None:
    """The work a sweep recorded for `run_id`; None when it left no record."""
    try:
        record = _record(store, run_id)
        return None if record is None else [tuple(w) for w in record["work"]]
    except (ValueError, KeyError, TypeError) as exc:
        where = store.place.join(store.place.run_record(run_id))
        raise InputError(f"{where}: not a run record ({exc})") from None


def known_runs(store, jobs: pd.DataFrame) -> list[str]:
    """Every run id the store knows (job rows and run records), oldest first: by the run's newest
    finished_at, else when its record was written, else the start its id names. Not by the id itself: a recorded sample's ids
    (`recorded-...`) would sort after every sweep's."""
    ids = set(jobs["run_id"].astype(str)) if not jobs.empty else set()
    recorded: dict[str, datetime] = {}  # a run that ran no job (all already stored) has its record's time
    for name, written in store.place.files(RUNS).items():
        if name.endswith(".json"):
            ids.add(name.removesuffix(".json"))
            recorded[name.removesuffix(".json")] = written
    finished: dict[str, datetime] = {}
    if not jobs.empty and "finished_at" in jobs:
        stamps = pd.to_datetime(jobs["finished_at"], utc=True, errors="coerce")
        finished = {
            str(k): v.to_pydatetime() for k, v in stamps.groupby(jobs["run_id"].astype(str)).max().dropna().items()
        }
    oldest = datetime.min.replace(tzinfo=timezone.utc)
    return sorted(ids, key=lambda r: (finished.get(r) or recorded.get(r) or started_at(r) or oldest, r))


def started_at(run_id: str) -> datetime | None:
    match = _RUN_ID.match(run_id)
    return datetime.strptime(match.group(1), "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc) if match else None


def pick_run(store, jobs: pd.DataFrame, *, run: str | None, night: str | None) -> str:
    """The run a report is for: `run`, the last run of `night` (YYYY-MM-DD), or the newest run."""
    runs = known_runs(store, jobs)
    if run is not None:
        if run not in runs:
            raise InputError(f"--run: no run {run!r} in store {store.uri} (newest: {', '.join(runs[-3:]) or 'none'})")
        return run
    if night is not None:
        that = _night_window(night)
        inside = [r for r in runs if (s := started_at(r)) is not None and that[0] <= s < that[1]]
        if not inside:
            raise InputError(f"--night: no run started in the night of {night} (noon to noon, local time)")
        return inside[-1]
    if not runs:
        raise InputError(f"store {store.uri}: no runs stored yet (run `labprobe sweep` first)")
    return runs[-1]


def _night_window(text: str) -> tuple[datetime, datetime]:
    try:
        day = date.fromisoformat(text)
    except ValueError:
        raise InputError(f"--night: expected a date YYYY-MM-DD, got {text!r}") from None
    local = datetime.combine(day, time(12)).astimezone()  # noon, this machine's zone: the schedule's clock
    return local.astimezone(timezone.utc), (local + timedelta(days=1)).astimezone(timezone.utc)
