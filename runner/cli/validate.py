"""`labprobe validate [--cluster F]`: check cluster.yaml and expand every plan, running nothing.

Like a dry run: no Ray, no host is touched (checkpoint fingerprints come from the hosts at sweep
time). Prints the number of jobs per plan and host; every problem on its own line naming the key
path; exit 2 when there is any.
"""

from __future__ import annotations

import argparse
import collections
import sys

from runner.lab.cluster import ClusterError, load_cluster
from runner.lab.plan import expand


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--cluster", default="cluster.yaml", help="the cluster file (default: ./cluster.yaml)")


def main(args: argparse.Namespace) -> int:
    try:
        cluster = load_cluster(args.cluster)
    except ClusterError as exc:
        for line in exc.errors:
            print(f"labprobe validate: error: {line}", file=sys.stderr)
        return 2
    spec = cluster.spec
    print(f"{cluster.path}: ok: {len(spec.hosts)} hosts, {len(spec.checkpoints)} checkpoints, "
          f"{len(spec.corpora)} corpora, {len(spec.plans)} plans; store {cluster.store_root()}")
    for plan in spec.plans:
        jobs = expand(cluster, plan)
        per_host = collections.Counter(j.host for j in jobs)
        num_gpu = sum(j.gpu for j in jobs)
        hosts = ", ".join(f"{h} {n}" for h, n in per_host.items())
        print(f"  plan {plan}: {len(jobs)} jobs ({num_gpu} GPU) over {len(per_host)} hosts: {hosts}")
    if spec.schedule is not None:
        s = spec.schedule
        print(f"  schedule: plan {s.plan}, cron {s.cron!r}, deadline {s.deadline or '-'}, log {s.log or '-'}")
    return 0
