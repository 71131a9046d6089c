"""`labprobe purge`: remove the intermediate `checkpoints/` of training runs across the lab's hosts.

Each host's runs root (`runs_root` in cluster.yaml) is scanned by a Ray task pinned to that host
(runner/chores/purge_fs.py does the filesystem work). Without `--yes` only the plan is printed: each
`checkpoints/` to remove with its size, and each run refused with the reasons. With `--yes` the
adapters are digested, the approved directories deleted with every refusal re-checked at the
moment of deletion, the digests verified, and the space each filesystem got back measured.

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
import os
import re
import subprocess
from datetime import datetime, timezone
from typing import Any, Callable

from probes.result import InputError
from runner.chores import purge_fs
from runner.clock import new_run_id
from runner.hosts.jobenv import base_env
from runner.hosts.nodes import HostFailure, node_host, run_on_hosts

PROBE = "purge"
NO_CHECKPOINT = "-"


@dataclasses.dataclass(kw_only=True)
class Report:
    """What a purge found and did, over all hosts."""

    yes: bool
    roots: dict[str, str]
    run_glob: str
    plan: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    outcome: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    filesystems: dict[str, list[dict]] = dataclasses.field(default_factory=dict)
    failures: dict[str, str] = dataclasses.field(default_factory=dict)
    envs: dict[str, dict] = dataclasses.field(default_factory=dict)
    started_at: datetime = dataclasses.field(default_factory=lambda: datetime.now(timezone.utc))
    run_id: str = ""

    def __post_init__(self) -> None:
        self.run_id = self.run_id or new_run_id(self.started_at)

    def host_ok(self, host: str) -> bool:
        rows = self.outcome.get(host, [])
        return host not in self.failures and not any(
            r["action"] == "failed" or r["adapter_digests_verified"] is False for r in rows)

    @property
    def ok(self) -> bool:
        return all(self.host_ok(h) for h in self.roots)


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
def _on_host(roots: dict[str, str], run_glob: str, planned: dict[str, list[str]] | None) -> dict:
    """Plan (planned None) or execute on the host this task landed on, told by its own label.
    Bad input on the host (no runs root) comes back as a value, not an error, so the driver can
    stop everything before any host deletes anything."""
    host = node_host()
    env = base_env()
    try:
        if planned is None:
            rows = purge_fs.scan_root(roots[host], run_glob, host)
            fs = filesystems([r for r in rows if r.action == "remove"], host, {})
            return {"actions": [dataclasses.asdict(r) for r in rows],
                    "filesystems": [dataclasses.asdict(f) for f in fs], "env": env}
        approved = set(planned.get(host, []))
        done = purge_fs.execute(roots[host], run_glob, sorted(approved), host)
        fs = filesystems([r for r in done.actions if r.path in approved], host, done.avail_before,
                         done.avail_after, done.actions)
        return {"actions": [dataclasses.asdict(r) for r in done.actions],
                "filesystems": [dataclasses.asdict(f) for f in fs], "env": env}
    except InputError as exc:
        return {"bad_input": f"{host}: {exc}"}


def purge(roots: dict[str, str], run_glob: str = "*", *, yes: bool = False, timeout_s: float = 3600.0,
          on_plan: Callable[[Report], None] | None = None) -> Report:
    """Plan on every host; `on_plan(report)` (storing the plan) before anything is deleted; with
    `yes`, execute the plan on every host that answered."""
    report = Report(yes=yes, roots=roots, run_glob=check_glob(run_glob))
    answers = run_on_hosts(_on_host, list(roots), roots, run_glob, None, timeout_s=timeout_s)
    bad = [a["bad_input"] for a in answers.values() if isinstance(a, dict) and "bad_input" in a]
    if bad:
        raise InputError(bad[0])
    for host, answer in answers.items():
        if isinstance(answer, HostFailure):
            report.failures[host] = answer.reason
            continue
        report.plan[host], report.envs[host] = answer["actions"], answer["env"]
        report.filesystems[host] = answer["filesystems"]
    if on_plan is not None:
        on_plan(report)
    if yes:
        _execute(report, timeout_s)
    return report


def _execute(report: Report, timeout_s: float) -> None:
    planned = {h: [r["path"] for r in rows if r["action"] == "remove"] for h, rows in report.plan.items()}
    # Every host that answered runs it, even with nothing to remove: its adapters get verified too.
    answers = run_on_hosts(_on_host, list(report.plan), report.roots, report.run_glob, planned, timeout_s=timeout_s)
    for host, answer in answers.items():
        if isinstance(answer, HostFailure):
            report.failures[host] = (f"{answer.reason}; the purge may have stopped part way: "
                                     "run the dry run again to see what remains")
        elif "bad_input" in answer:
            report.failures[host] = answer["bad_input"]
        else:
            report.outcome[host], report.filesystems[host] = answer["actions"], answer["filesystems"]


# -- the store ----------------------------------------------------------------------------------
_INTERNAL = ("host", "dev", "ino")  # host is the partition; dev/ino are st_dev/st_ino for joins here


def store_phase(store: Any, report: Report, phase: str) -> None:
    """Per host: purge.actions and purge.filesystems of one phase ("plan": every host, before any
    deletion; "outcome": the hosts that planned), then that phase's jobs row, which commits them."""
    from runner.hosts.jobenv import code_version
    from runner.store.store import JobKey

    finished = datetime.now(timezone.utc)
    for host in report.roots if phase == "plan" else report.plan:
        config = {"host": host, "runs_root": report.roots[host], "run_glob": report.run_glob,
                  "yes": report.yes}
        digest = _hash(config)
        key = JobKey(run_id=report.run_id, job_id=f"purge-plan-{digest}" if phase == "plan" else f"purge-{digest}",
                     probe=PROBE, host=host, checkpoint=NO_CHECKPOINT, checkpoint_fp=NO_CHECKPOINT,
                     config_hash=digest, code_version=code_version(), finished_at=finished)
        freed = {f["fs"]: f["freed_bytes"] for f in report.filesystems.get(host, [])}
        rows = (report.plan if phase == "plan" else report.outcome).get(host, [])
        actions = [{**{k: v for k, v in r.items() if k not in _INTERNAL},
                    "fs_freed_bytes": freed.get(r["fs"]) if phase == "outcome" else None}
                   for r in rows]
        store.write_table(key, "actions", actions)
        store.write_table(key, "filesystems", [{**{k: v for k, v in f.items() if k != "host"}, "phase": phase}
                                               for f in report.filesystems.get(host, [])])
        ok = host not in report.failures if phase == "plan" else report.host_ok(host)
        store.write_job(key, status="ok" if ok else "failed",
                        reason=report.failures.get(host, "") if phase == "plan" else _host_reason(report, host),
                        started_at=report.started_at, wall_s=(finished - report.started_at).total_seconds(),
                        summary=host_summary(report, host) | {"phase": phase}, config=config,
                        env=report.envs.get(host, {}))


def _hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


# -- filesystems (measured on the host) --------------------------------------------------------
@dataclasses.dataclass(kw_only=True)
class FsRow:
    """One filesystem holding planned checkpoints/ on one host."""

    host: str
    fs: str
    fstype: str
    mount: str
    source: str
    planned_bytes: int
    """Allocated bytes of the checkpoints/ planned for removal on this filesystem."""
    removed_bytes: int = 0
    """Allocated bytes of the checkpoints/ actually removed."""
    avail_before_bytes: int | None = None
    avail_after_bytes: int | None = None
    freed_bytes: int | None = None
    """Measured: available bytes after minus before (other writers on the filesystem blur it)."""
    zfs_snapshots: int | None = None
    note: str = ""


def filesystems(rows: list[purge_fs.ActionRow], host: str, before: dict[int, int],
                after: dict[int, int] | None = None, outcome: list[purge_fs.ActionRow] | None = None, *,
                mountinfo: str = "/proc/self/mountinfo", zfs: str = "zfs") -> list[FsRow]:
    """Per filesystem: planned and removed bytes, space measured before/after, and the ZFS
    snapshots that would keep the space held."""
    mounts = read_mounts(mountinfo)
    out = []
    for dev in sorted({r.dev for r in rows}):
        mine = [r for r in rows if r.dev == dev]
        mount = mount_of(mine[0].path, dev, mounts)
        fs = FsRow(host=host, fs=mine[0].fs, fstype=mount.get("fstype", "?"),
                   mount=mount.get("mount", "?"), source=mount.get("source", "?"),
                   planned_bytes=sum(r.alloc_bytes for r in mine), avail_before_bytes=before.get(dev))
        if outcome is not None:
            fs.removed_bytes = sum(r.alloc_bytes for r in outcome
                                   if r.dev == dev and r.action == "removed")
        if after is not None and dev in after and dev in before:
            fs.avail_after_bytes = after[dev]
            fs.freed_bytes = after[dev] - before[dev]
        if fs.fstype == "zfs":
            fs.zfs_snapshots, fs.note = zfs_snapshot_note(fs.source, zfs)
        elif fs.freed_bytes is not None and fs.freed_bytes < fs.removed_bytes // 2:
            fs.note = ("less came back than was removed: files still open (a running job), hard "
                       "links elsewhere, or other writers on this filesystem meanwhile")
        out.append(fs)
    return out


def read_mounts(mountinfo: str = "/proc/self/mountinfo") -> list[dict[str, str]]:
    """Mounts from mountinfo: major:minor, mount point, fstype, source (a ZFS dataset's name)."""
    try:
        with open(mountinfo, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return []
    mounts = []
    for line in lines:
        fields = line.split()
        if "-" not in fields[6:] or len(fields) < fields.index("-", 6) + 3:
            continue
        sep = fields.index("-", 6)
        mounts.append({"dev": fields[2], "mount": _unescape(fields[4]),
                       "fstype": fields[sep + 1], "source": _unescape(fields[sep + 2])})
    return mounts


def _unescape(text: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def mount_of(path: str, dev: int, mounts: list[dict[str, str]]) -> dict[str, str]:
    """The mount holding `path`: the deepest mount point above it, preferring those whose
    major:minor is the path's st_dev (btrfs subvolumes report another device)."""
    real = os.path.realpath(os.path.dirname(path))
    above = [m for m in mounts if purge_fs.is_inside(real, m["mount"])]
    same_dev = [m for m in above if m["dev"] == f"{os.major(dev)}:{os.minor(dev)}"]
    candidates = same_dev or above
    return max(candidates, key=lambda m: len(m["mount"])) if candidates else {}


def zfs_snapshot_note(dataset: str, zfs: str = "zfs") -> tuple[int | None, str]:
    """How many snapshots the dataset has, and what that means for the space purged."""
    cmd = [zfs, "list", "-H", "-t", "snapshot", "-o", "name", "-d", "1", dataset]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return None, ("ZFS, but no `zfs` command on this host: cannot tell whether snapshots "
                      "hold the purged space")
    except subprocess.TimeoutExpired:
        return None, "ZFS: `zfs list` gave no answer within 30 s: snapshots unknown"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        return None, f"ZFS: `zfs list` failed ({last}): snapshots unknown"
    num = sum(1 for name in done.stdout.splitlines() if name.startswith(f"{dataset}@"))
    if num == 0:
        return 0, "ZFS, no snapshots of the dataset: the space is returned (ZFS frees asynchronously)"
    return num, (f"ZFS dataset {dataset} has {num} snapshot(s): the purged space stays held by "
                 "them, not returned, until they are destroyed")


# -- presentation -------------------------------------------------------------------------------




def _host_reason(report: Report, host: str) -> str:
    if host in report.failures:
        return report.failures[host]
    bad = [r for r in report.outcome.get(host, [])
           if r["action"] == "failed" or r["adapter_digests_verified"] is False]
    return "; ".join(f"{r['run']}: {r['reason'] or 'adapter digest changed'}" for r in bad)


def host_summary(report: Report, host: str) -> dict[str, Any]:
    plan, outcome = report.plan.get(host, []), report.outcome.get(host, [])
    count = lambda rows, action: sum(1 for r in rows if r["action"] == action)  # noqa: E731
    fs = report.filesystems.get(host, [])
    return {"mode": "purge" if report.yes else "dry-run",
            "num_remove_planned": count(plan, "remove"), "num_refused": count(plan, "refuse"),
            "planned_bytes": sum(r["alloc_bytes"] for r in plan if r["action"] == "remove"),
            "num_removed": count(outcome, "removed"), "num_failed": count(outcome, "failed"),
            "num_refused_at_deletion": sum(1 for r in outcome if r["reason"].startswith("at deletion")),
            "freed_bytes": sum(f["freed_bytes"] or 0 for f in fs) if host in report.outcome else None,
            "adapters_verified": all(r["adapter_digests_verified"] is not False for r in outcome)}
