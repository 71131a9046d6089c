"""`labprobe purge`: remove the intermediate `checkpoints/` of training runs across the lab's hosts.

This module is the orchestration: a Ray task pinned to each host (`plan_on_host`, then with
`--yes` `purge_on_host`, or `recover_on_host`), the report across hosts, and the store's rows.
What a host may delete is runner.chores.scan, how it deletes runner.chores.deletion, the
mount table and the space measured per filesystem runner.chores.mounts, the stored plans
runner.chores.plans, the locks runner.chores.locks. Without `--yes` only the plan is
printed and stored under its id (the run id): each `checkpoints/` to remove with its size, and
each run refused with the reasons. `--yes` carries out one stored plan, exactly: only the runs it
showed as `remove`, each only while its checkpoints/ listing is still the one shown; the adapters
are digested, every refusal re-checked, the approved directories set aside, the adapters verified
unchanged, the directories deleted, the digests verified again, and the space each filesystem got
back measured. Each host task holds its runs root's lock. Bad input found on a host (no runs root
there, another purge holding it) is raised there, carried back, and raised here before any host
deletes anything.

Every invocation, dry or not, is stored: tables `purge.actions` and `purge.filesystems`, one file
per host and phase under `checkpoint=-` (a purge acts on runs, not on one model checkpoint; the run
is a column), each phase committed by its own `jobs` row. The plan (phase "plan", job
`purge-plan-<hash>`) is stored before anything is deleted, so a purge interrupted part way (Ctrl-C,
a timeout, a crash) leaves the plan it was carrying out; with --yes the outcome (phase "outcome",
job `purge-<hash>`, same run_id) follows. A plan with no outcome beside it is an interrupted purge.
Without an address (or with `--address local`) Ray is the sweep's embedded one on this machine, its
node labelled `local`: only a host `local` with a runs_root can be purged, other hosts read as
unreachable. Exit 0 when everything approved was removed and every adapter verified
(refusals are the tool working), 1 when a host, a deletion or a digest failed, 2 on bad input.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from probes.result import InputError
from runner.chores import deletion, scan
from runner.chores.fstree import readable
from runner.chores.locks import root_lock
from runner.chores.mounts import filesystems
from runner.chores.recover import recover
from runner.clock import new_run_id
from runner.hosts.jobenv import base_env, code_version
from runner.hosts.nodes import HostFailure, node_host, run_on_hosts
from runner.store.store import CorruptStoreError, JobKey, Store, StoreError

PROBE = "purge"
NO_CHECKPOINT = "-"


@dataclasses.dataclass(kw_only=True)
class Report:
    """What a purge found and did, over all hosts."""

    yes: bool
    roots: dict[str, str]
    run_glob: str
    mode: str = ""
    """dry-run, purge or recover (from `yes` when not given)."""
    plan_id: str = ""
    """With --yes: the run id of the dry run whose plan is carried out."""
    plan: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    outcome: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    filesystems: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    envs: dict[str, dict] = dataclasses.field(default_factory=dict)
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(timezone.utc))
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or new_run_id(self.started_at)
        self.mode = self.mode or ("purge" if self.yes else "dry-run")

    def host_ok(self, host: str) -> bool:
        rows = self.outcome.get(host, [])
        return host not in self.failures and not any(
            r["action"] == "failed" or r["adapter_digests_verified"] is False for r in rows
        )

    @property
    def ok(self) -> bool:
        return all(self.host_ok(h) for h in self.roots)


def printable(text: str) -> str:
    """Free text (an error naming a file) with undecodable bytes as `\\xNN`: the store's Parquet
    and the terminal take no surrogate escapes."""
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file name makes
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def runs_roots(cluster: Any, hosts: list[str] | None) -> dict[str, str]:
    """Host -> runs root from the cluster file; unknown hosts and hosts without one are bad input."""
    known = cluster.hosts
    for host in hosts or []:
        if host not in known:
            raise InputError(f"unknown host {host!r} (hosts in {cluster.path.name}: {', '.join(known)})")
    chosen = hosts or [h for h in known if cluster.runs_dir(h)]
    missing = [h for h in chosen if not cluster.runs_dir(h)]
    if missing:
        raise InputError(f"{cluster.path.name}: hosts.{missing[0]}.runs_root is not set")
    if not chosen:
        raise InputError(f"{cluster.path.name}: no host has a runs_root")
    return {h: cluster.runs_dir(h) for h in dict.fromkeys(chosen)}


def check_glob(run_glob: str) -> str:
    if not run_glob or "/" in run_glob:
        raise InputError(f"--run {run_glob!r}: a run directory name pattern, without '/'")
    return run_glob


# -- on each host (a pinned Ray task) -----------------------------------------------------------
def plan_on_host(roots: dict[str, str], run_glob: str, quiets: dict[str, float] | None = None) -> dict:
    """The plan of the host this task landed on (told by its own node label). A missing runs root,
    or one another purge holds, raises InputError naming the host."""
    host = node_host()
    try:
        root = scan.resolve_root(roots[host])
        with root_lock(root):
            rows = scan.scan_root(root, run_glob, host, (quiets or {}).get(host, 0.0))
    except InputError as exc:
        raise InputError(f"{host}: {exc}") from None
    fs = filesystems([r for r in rows if r.action == "remove"], host, {})
    return _answer(rows, fs)


def purge_on_host(
    roots: dict[str, str], run_glob: str, planned: dict[str, dict[str, str]], quiets: dict[str, float] | None = None
) -> dict:
    """Carry out this host's part of the plan (`planned`: host -> approved checkpoints/ path ->
    the listing fingerprint the plan showed)."""
    host = node_host()
    approved = dict(planned.get(host, {}))
    try:
        root = scan.resolve_root(roots[host])
        with root_lock(root):
            done = deletion.execute(root, run_glob, approved, host, (quiets or {}).get(host, 0.0))
    except InputError as exc:
        raise InputError(f"{host}: {exc}") from None
    fs = filesystems(
        [r for r in done.actions if r.path in approved], host, done.avail_before, done.avail_after, done.actions
    )
    return _answer(done.actions, fs)


def recover_on_host(roots: dict[str, str]) -> dict:
    """Finish or undo what an interrupted purge left set aside under this host's runs root."""
    host = node_host()
    try:
        root = scan.resolve_root(roots[host])
        with root_lock(root):
            rows = recover(root, host)
    except InputError as exc:
        raise InputError(f"{host}: {exc}") from None
    return _answer(rows, [])


def _answer(rows: list[scan.ActionRow], fs: list[Any]) -> dict:
    """What goes back to the driver: printable text only (names as fstree.readable writes them)."""
    return {
        "actions": [scan.public(r) for r in rows],
        "filesystems": [dataclasses.asdict(f) | {"mount": readable(f.mount), "source": readable(f.source)} for f in fs],
        "env": base_env(),
    }


def purge(
    roots: dict[str, str],
    run_glob: str = "*",
    *,
    yes: bool = False,
    timeout_s: float = 3600.0,
    on_plan: Callable[[Report], None] | None = None,
    shown: dict[str, dict[str, str]] | None = None,
    quiets: dict[str, float] | None = None,
    plan_id: str = "",
    run_id: str = "",
) -> Report:
    """Plan on every host; `on_plan(report)` (storing the plan) before anything is deleted; with
    `yes`, carry out `shown` (host -> checkpoints/ path -> listing fingerprint: the stored plan's
    `remove` rows) on every host that answered. Bad input on any host raises InputError before
    anything is deleted or stored. `quiets`: host -> runs_quiet_min in seconds."""
    report = Report(yes=yes, roots=roots, run_glob=check_glob(run_glob), plan_id=plan_id, run_id=run_id)
    _gather(report, run_on_hosts(plan_on_host, list(roots), roots, run_glob, quiets, timeout_s=timeout_s), "plan")
    if on_plan is not None:
        on_plan(report)
    if yes:
        _execute(report, timeout_s, shown or {}, quiets)
    return report


def recover_all(roots: dict[str, str], *, timeout_s: float = 3600.0, run_id: str = "") -> Report:
    """`purge --recover` on every host: one row per folder an interrupted purge left set aside."""
    report = Report(yes=True, roots=roots, run_glob="*", mode="recover", run_id=run_id)
    _gather(report, run_on_hosts(recover_on_host, list(roots), roots, timeout_s=timeout_s), "outcome")
    return report


def _gather(report: Report, answers: dict[str, Any], into: str) -> None:
    """Each host's answer into the report; a host's bad input raised (nothing done yet anywhere)."""
    for answer in answers.values():
        if isinstance(answer, HostFailure) and isinstance(answer.error, InputError):
            raise InputError(str(answer.error)) from answer.error
    for host, answer in answers.items():
        if isinstance(answer, HostFailure):
            report.failures[host] = printable(answer.reason)
            continue
        getattr(report, into)[host], report.envs[host] = answer["actions"], answer["env"]
        report.filesystems[host] = answer["filesystems"]


def _execute(
    report: Report, timeout_s: float, shown: dict[str, dict[str, str]], quiets: dict[str, float] | None
) -> None:
    # Every host that answered runs it, even with nothing to remove: its adapters get verified too.
    answers = run_on_hosts(
        purge_on_host, list(report.plan), report.roots, report.run_glob, shown, quiets, timeout_s=timeout_s
    )
    for host, answer in answers.items():
        if isinstance(answer, HostFailure):
            # The runs root gone since the plan is this host's failure, not bad input: other hosts
            # have deleted by now, and their outcome must be stored.
            report.failures[host] = printable(
                f"{answer.reason}; the purge may have stopped part way: run the dry run again to see what remains"
            )
        else:
            report.outcome[host], report.filesystems[host] = answer["actions"], answer["filesystems"]


# -- the store ----------------------------------------------------------------------------------
_INTERNAL = ("host", "dev", "ino")  # host is the partition; dev/ino are st_dev/st_ino for joins here


STORE_ATTEMPTS = 4


def store_phase(store: Any, report: Report, phase: str) -> None:
    """Per host: purge.actions and purge.filesystems of one phase ("plan": every host, before any
    deletion; "outcome": the hosts that planned, or with --recover every host), then that phase's
    jobs row, which commits them. A commit that fails (a concurrent change to the table, a handle
    gone stale under a vacuum) is tried again on a fresh handle; what still fails is one line."""
    finished = datetime.now(timezone.utc)
    hosts = report.roots if phase == "plan" or report.mode == "recover" else report.plan
    for host in hosts:
        key, rows, fs, job = _host_records(report, host, phase, finished)
        for attempt in range(STORE_ATTEMPTS):
            try:
                _commit(store, key, rows, fs, job)
                break
            except (StoreError, CorruptStoreError, OSError) as exc:
                if attempt == STORE_ATTEMPTS - 1:
                    raise InputError(
                        f"store {store.root}: the purge's {phase} (run {report.run_id}) could not be stored: {exc}"
                    ) from None
                store = Store(store.place)
                time.sleep(0.2 * (attempt + 1))


def _commit(store: Store, key: JobKey, rows: list[dict], fs: list[dict], job: dict) -> None:
    """The host's tables then its jobs row, each skipped when an earlier attempt stored it."""
    for table, records in (("actions", rows), ("filesystems", fs)):
        if records and key.job_id not in store._stored(f"{PROBE}.{table}", key.run_id):
            store.write_table(key, table, records)
    if key.job_id not in store._stored("jobs", key.run_id):
        store.write_job(key, **job)


def _host_records(report: Report, host: str, phase: str, finished: datetime) -> tuple[JobKey, list, list, dict]:
    config = {"host": host, "runs_root": report.roots[host], "run_glob": report.run_glob, "yes": report.yes}
    if report.plan_id:
        config["plan_id"] = report.plan_id
    digest = _hash(config | ({"mode": report.mode} if report.mode == "recover" else {}))
    prefix = {"plan": "purge-plan-", "outcome": "purge-recover-" if report.mode == "recover" else "purge-"}[phase]
    key = JobKey(
        run_id=report.run_id,
        job_id=prefix + digest,
        probe=PROBE,
        host=host,
        checkpoint=NO_CHECKPOINT,
        checkpoint_fp=NO_CHECKPOINT,
        config_hash=digest,
        code_version=code_version(),
        finished_at=finished,
    )
    freed = {f["fs"]: f["freed_bytes"] for f in report.filesystems.get(host, [])}
    rows = [
        {
            **{k: v for k, v in r.items() if k not in _INTERNAL},
            "fs_freed_bytes": freed.get(r["fs"]) if phase == "outcome" else None,
        }
        for r in (report.plan if phase == "plan" else report.outcome).get(host, [])
    ]
    fs = [{**{k: v for k, v in f.items() if k != "host"}, "phase": phase} for f in report.filesystems.get(host, [])]
    ok = host not in report.failures if phase == "plan" else report.host_ok(host)
    job = {
        "status": "ok" if ok else "failed",
        "reason": report.failures.get(host, "") if phase == "plan" else _host_reason(report, host),
        "started_at": report.started_at,
        "wall_s": (finished - report.started_at).total_seconds(),
        "summary": host_summary(report, host) | {"phase": phase},
        "config": config,
        "env": report.envs.get(host, {}),
    }
    return key, rows, fs, job


def _hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


# -- what the store keeps of a host's part ------------------------------------------------------
def _host_reason(report: Report, host: str) -> str:
    if host in report.failures:
        return report.failures[host]
    bad = [r for r in report.outcome.get(host, []) if r["action"] == "failed" or r["adapter_digests_verified"] is False]
    return "; ".join(f"{r['run']}: {r['reason'] or 'adapter digest changed'}" for r in bad)


def host_summary(report: Report, host: str) -> dict[str, Any]:
    plan, outcome = report.plan.get(host, []), report.outcome.get(host, [])

    def count(rows, action):
        return sum(1 for r in rows if r["action"] == action)

    fs = report.filesystems.get(host, [])
    return {
        "mode": report.mode,
        "plan_id": report.plan_id,
        "num_remove_planned": count(plan, "remove"),
        "num_refused": count(plan, "refuse"),
        "planned_bytes": sum(r["alloc_bytes"] for r in plan if r["action"] == "remove"),
        "num_removed": count(outcome, "removed"),
        "num_restored": count(outcome, "restored"),
        "num_failed": count(outcome, "failed"),
        "num_refused_at_deletion": sum(1 for r in outcome if r["reason"].startswith("at deletion")),
        "freed_bytes": sum(f["freed_bytes"] or 0 for f in fs) if host in report.outcome else None,
        "adapters_verified": all(r["adapter_digests_verified"] is not False for r in outcome),
    }
