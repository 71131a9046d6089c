"""`labprobe validate [--cluster F] [--json]`: check cluster.yaml and expand every plan, running nothing.

Like a dry run: no Ray, no host is touched (checkpoint fingerprints come from the hosts at sweep
time). Prints the number of jobs per plan and host; every problem on its own line naming the key
path; exit 2 when there is any. `--json` prints one object instead:

    {"ok": true, "file": "/lab/cluster.yaml", "errors": [],
     "plans": {"demo": {"jobs": 7, "gpu_jobs": 0, "hosts": {"local": 7}}}, "schedule": {...} or null,
     "store": "/lab/results"}

with each error as {"file": ..., "key": "plans.demo[0].hosts[1]" (null for the file as a whole),
"message": ...}.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path
from typing import Any

from probes.result import InputError
from runner.lab.cluster import Cluster, ClusterError, load_cluster
from runner.lab.plan import expand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default="cluster.yaml", help="the cluster file (default: ./cluster.yaml)")
    parser.add_argument("--json", action="store_true", help="print one JSON object (ok, errors, plans)")


def main(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args.cluster)
        plans = {plan: plan_counts(cluster, plan) for plan in cluster.spec.plans}
    except ClusterError as exc:
        if args.json:
            return _print_json(args.cluster, [{"file": exc.file, "key": k, "message": m} for k, m in exc.problems])
        for line in exc.errors:
            print(f"labprobe validate: error: {line}", file=sys.stderr)
        return 2
    except InputError as exc:
        if not args.json:
            raise
        return _print_json(args.cluster, [{"file": Path(args.cluster).name, "key": None, "message": str(exc)}])
    if args.json:
        return _print_json(args.cluster, [], cluster=cluster, plans=plans)
    _print_text(cluster, plans)
    return 0


def plan_counts(cluster: Cluster, plan: str) -> dict[str, Any]:
    """Jobs of a plan: in all, on GPUs, per host (in the file's host order)."""
    jobs = expand(cluster, plan)
    per_host = collections.Counter(j.host for j in jobs)
    return {
        "jobs": len(jobs),
        "gpu_jobs": sum(j.gpu for j in jobs),
        "hosts": {h: per_host[h] for h in cluster.hosts if per_host[h]},
    }


def _print_text(cluster: Cluster, plans: dict[str, dict[str, Any]]) -> None:
    spec = cluster.spec
    print(
        f"{cluster.path}: ok: {len(spec.hosts)} hosts, {len(spec.checkpoints)} checkpoints, "
        f"{len(spec.corpora)} corpora, {len(spec.plans)} plans; store {cluster.store_root()}"
    )
    for plan, counts in plans.items():
        hosts = ", ".join(f"{h} {n}" for h, n in counts["hosts"].items())
        print(
            f"  plan {plan}: {counts['jobs']} jobs ({counts['gpu_jobs']} GPU) over {len(counts['hosts'])} "
            f"hosts: {hosts}"
        )
    if spec.schedule is not None:
        s = spec.schedule
        print(f"  schedule: plan {s.plan}, cron {s.cron!r}, deadline {s.deadline or '-'}, log {s.log or '-'}")


def _print_json(
    path: str,
    errors: list[dict[str, Any]],
    *,
    cluster: Cluster | None = None,
    plans: dict[str, dict[str, Any]] | None = None,
) -> int:
    schedule = cluster.spec.schedule if cluster is not None else None
    out = {
        "ok": not errors,
        "file": str(cluster.path if cluster is not None else Path(path).absolute()),
        "errors": errors,
        "plans": plans or {},
        "schedule": schedule.model_dump() if schedule is not None else None,
        "store": str(cluster.store_root()) if cluster is not None else None,
    }
    print(json.dumps(out, indent=1))
    return 0 if not errors else 2
