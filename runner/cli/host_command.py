"""`labprobe host-command NAME [--cluster F]`: the exact `ray start` line that makes a lab machine a host.

A host is a Ray node labelled `labprobe.host=NAME` with the GPU count cluster.yaml gives it. The
head host (`ray.head`, else the first host) runs `ray start --head`; every other host joins it at
`<head address>:<port>`. Every GPU Ray counts on a node is a slot: a GPU job takes one (`num_gpus=1`),
so a host runs one GPU job per card at a time, even across sweeps on different stores (docs/gpu-queue.md).

Token authentication: every node of one cluster must present the same token.
Generate it once on the head (`ray get-auth-token --generate` writes `~/.ray/auth_token`), copy
that file to each host (same path, mode 0600) or point `RAY_AUTH_TOKEN_PATH` at a copy, or export
`RAY_AUTH_TOKEN`; `RAY_AUTH_MODE=token` on every node and driver (Ray 2.60 turns it on by default
only for local clusters). The printed line carries it.
"""

from __future__ import annotations

import argparse
import shlex

from probes.result import InputError
from runner.hosts.nodes import HOST_LABEL
from runner.lab.cluster import Cluster, load_cluster

TOKEN_NOTE = """\
# Ray token auth: every node and every driver of one cluster uses the same token.
#   once, on the head:  RAY_AUTH_MODE=token ray get-auth-token --generate   (writes ~/.ray/auth_token)
#   copy that file to each host's ~/.ray/auth_token (chmod 600), or point RAY_AUTH_TOKEN_PATH at a
#   copy (or export RAY_AUTH_TOKEN=<token>); keep RAY_AUTH_MODE=token set for `ray start` and for
#   `labprobe sweep --address ...` on every machine."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="a host of the cluster file")
    parser.add_argument("--cluster", default="cluster.yaml", help="the cluster file (default: ./cluster.yaml)")


def ray_start_command(cluster: Cluster, name: str) -> list[str]:
    hosts = cluster.hosts
    if name not in hosts:
        raise InputError(f"{cluster.path.name}: no host {name!r} (hosts: {', '.join(hosts)})")
    host, head, port = hosts[name], cluster.head(), cluster.spec.ray.port
    cmd = ["RAY_AUTH_MODE=token", "ray", "start"]
    cmd += ["--head", f"--port={port}"] if host.name == head.name else [f"--address={head.address}:{port}"]
    cmd += [f"--num-gpus={host.gpus}", "--labels", f"{HOST_LABEL}={host.name}"]
    return cmd


def main(args: argparse.Namespace) -> int:
    cluster = load_cluster(args.cluster)
    cmd = ray_start_command(cluster, args.name)
    role = "head" if cluster.head().name == args.name else f"worker (head: {cluster.head().name})"
    print(f"# {args.name}: {role}")
    print(TOKEN_NOTE)
    print(shlex.join(cmd))
    return 0
