"""The plans a dry run stored, read back for `labprobe purge --yes`.

A dry run's plan is its `purge.actions` rows (phase "plan") under its run id, the plan's id, and
one jobs row per host whose config names the host's runs root and the `--run` pattern. `--yes`
carries out one such plan: per host, the `remove` rows' checkpoints/ paths, each with the listing
fingerprint the plan showed (scan.ActionRow.listing_sha256).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pandas as pd
import pyarrow.compute as pc

from probes.result import InputError

PROBE = "purge"


@dataclasses.dataclass
class StoredPlan:
    plan_id: str
    roots: dict[str, str]
    run_glob: str
    shown: dict[str, dict[str, str]]
    """host -> checkpoints/ path -> listing fingerprint, of every `remove` row shown."""
    finished_at: Any = None
    num_bytes: int = 0


def dry_runs(store: Any) -> pd.DataFrame:
    """Jobs rows of every stored dry-run plan (one per host), oldest first."""
    jobs = store.jobs(probe=PROBE)
    if jobs.empty:
        return jobs
    plans = jobs[jobs["job_id"].str.startswith(f"{PROBE}-plan-")]
    dry = plans["config_json"].map(lambda text: not json.loads(text).get("yes", False))
    return plans[dry].sort_values(["finished_at", "run_id"], kind="stable")


def newest_plan_id(store: Any) -> str:
    plans = dry_runs(store)
    if plans.empty:
        raise InputError(f"store {store.root}: no purge plan stored: run `labprobe purge` (the dry run) first")
    return str(plans["run_id"].iloc[-1])


def load_plan(store: Any, plan_id: str, runs_dirs: dict[str, str | None]) -> StoredPlan:
    """The dry run `plan_id` as stored; `runs_dirs`: each host's runs root by the cluster file now,
    which must still be the plan's."""
    jobs = dry_runs(store)
    jobs = jobs[jobs["run_id"] == plan_id] if not jobs.empty else jobs
    if jobs.empty:
        raise InputError(f"--plan {plan_id}: no dry-run plan with that id in store {store.root}")
    configs = [json.loads(text) for text in jobs["config_json"]]
    roots = {c["host"]: c["runs_root"] for c in configs}
    for host, root in roots.items():
        if runs_dirs.get(host) != root:
            raise InputError(
                f"--plan {plan_id}: made for {host}'s runs root {root}, the cluster file now says "
                f"{runs_dirs.get(host)}: run the dry run again"
            )
    rows = store.read(f"{PROBE}.actions", filters=pc.field("run_id") == plan_id)
    if rows.empty:
        rows = pd.DataFrame({c: [] for c in ("host", "path", "alloc_bytes", "listing_sha256")})
    else:
        rows = rows[(rows["phase"] == "plan") & (rows["action"] == "remove")]
    if "listing_sha256" not in rows.columns or (rows["listing_sha256"].fillna("") == "").any():
        raise InputError(f"--plan {plan_id}: stored before plans kept their listings: run the dry run again")
    shown: dict[str, dict[str, str]] = {host: {} for host in roots}
    for host, path, listing in zip(rows["host"], rows["path"], rows["listing_sha256"]):
        shown.setdefault(host, {})[path] = listing
    return StoredPlan(
        plan_id=plan_id,
        roots=roots,
        run_glob=configs[0]["run_glob"],
        shown=shown,
        finished_at=jobs["finished_at"].max(),
        num_bytes=int(rows["alloc_bytes"].sum()) if len(rows) else 0,
    )
