"""`labprobe idle`: every GPU of the lab read where it sits, all hosts at once, idle or busy and why.

One pinned Ray task per host runs runner.gpu.idle's `read_local` there; a host that does not answer
reads `unreachable`, and so does a GPU NVML reports lost or one with nothing readable to judge by (a
field NVML does not give, such as a GB10's memory, is named in the reason, not a failure). Exit 0
when every GPU reads idle (or the host has none) and every host answered, else 1.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from runner.cli.options import positive_seconds
from runner.gpu.idle import GpuReading, Thresholds, read_local
from runner.hosts.nodes import HostFailure, connect, node_host, run_on_hosts
from runner.hosts.reach import DEFAULT_CONNECT_TIMEOUT_S
from runner.lab.cluster import load_cluster
from runner.log import foreign_output_to
from runner.tables import format_table


def read_pinned(per_host: dict[str, tuple[str | None, Thresholds]]) -> list[GpuReading]:
    """read_local for the host whose node this runs on (run_on_hosts passes one argument to all)."""
    host = node_host()
    if host not in per_host:
        raise RuntimeError(f"node label labprobe.host={host!r} is not one of {sorted(per_host)}")
    runs_dir, thresholds = per_host[host]
    return read_local(host, runs_dir=runs_dir, thresholds=thresholds)


def read_hosts(
    per_host: dict[str, tuple[str | None, Thresholds]], *, timeout_s: float
) -> dict[str, list[GpuReading] | Any]:
    """Every host at once, one pinned task each: host -> its readings, or a HostFailure."""

    window_s = max((t.window_s for _, t in per_host.values()), default=0.0)
    # num_cpus=0: a reading must not queue behind the jobs that fill a host's CPUs.
    return run_on_hosts(read_pinned, list(per_host), per_host, timeout_s=timeout_s + window_s, num_cpus=0)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Read every GPU of the lab through NVML, all hosts at once: idle or busy, and "
        "why. Exit 0 when no GPU reads busy or unreachable and every host answered, else 1."
    )
    parser.add_argument("--cluster", default="cluster.yaml", help="the lab's cluster file")
    parser.add_argument(
        "--address",
        default=None,
        help="Ray address (default: the cluster file's ray.address; unset there: an "
        "embedded local Ray, its node labelled `local`)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list of readings")
    parser.add_argument(
        "--timeout-s",
        type=positive_seconds,
        default=30.0,
        help="seconds to wait for a host, on top of the sampling window",
    )
    parser.add_argument(
        "--connect-timeout-s",
        type=positive_seconds,
        default=DEFAULT_CONNECT_TIMEOUT_S,
        help=f"how long to wait for the Ray head at --address (default: {DEFAULT_CONNECT_TIMEOUT_S:g})",
    )


def main(args: argparse.Namespace) -> int:
    cluster = load_cluster(args.cluster)
    per_host = {name: (cluster.runs_dir(name), Thresholds.from_cluster(h.idle)) for name, h in cluster.hosts.items()}
    # Ray's banners and warnings go to a log file, not into the readings on the terminal. Not in the
    # store: reading GPUs writes nothing there.
    with foreign_output_to(Path(tempfile.gettempdir()) / "labprobe-ray-idle.log"):
        # No address: the sweep's embedded Ray, one node labelled `local`; the other hosts read unreachable.
        connect(args.address or cluster.spec.ray.address, timeout_s=args.connect_timeout_s)
        results = read_hosts(per_host, timeout_s=args.timeout_s)
    rows: list[dict[str, Any]] = []
    for host, got in results.items():
        if isinstance(got, HostFailure):
            rows.append({"host": host, "gpu": None, "name": "", "verdict": "unreachable", "reason": got.reason})
        else:
            rows += [r.to_dict() | {"gpu": r.index if r.index >= 0 else None} for r in got]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
    else:
        print(
            format_table(
                [
                    {
                        "host": r["host"],
                        "gpu": "-" if r["gpu"] is None else r["gpu"],
                        "name": r["name"],
                        "verdict": r["verdict"],
                        "reason": r["reason"],
                    }
                    for r in rows
                ]
            )
        )
    return 0 if all(r["verdict"] in ("idle", "no-gpu") for r in rows) else 1
