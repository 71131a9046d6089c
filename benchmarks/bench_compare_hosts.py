"""`labprobe compare` with a 20-host cluster file (issue 28): wall time of the whole CLI in a fresh
process, and whether torch was imported on the way.

    PYTHONPATH=. python benchmarks/bench_compare_hosts.py [--nights 30] [--repeat 7] [--root DIR]

The store is benchmarks/store_history.py's lab (20 hosts x 10 checkpoint names, one carrier job per
host x checkpoint a night, built through the store's writer, compacted as every sweep does), NIGHTS
nights of it. The cluster file names the 20 hosts and the 10 checkpoints and carries a lab's plans
(carrier, profile and mask on every host, padding and bucket on a corpus), so loading it is what a
lab's compare pays. Printed: the median and min of REPEAT runs of
`python -m runner.cli compare --probe carrier --cluster F` and the `-X importtime` heaviest imports.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from benchmarks.store_history import build
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[1]
HOSTS, CHECKPOINTS = 20, 10


def cluster_file(folder: Path, store: Path) -> Path:
    hosts = [
        {"name": f"host{h:02d}", "address": f"host{h:02d}.lab", "gpus": 1 + h % 2, "checkpoints_root": "/data/ckpt"}
        for h in range(HOSTS)
    ]
    names = [f"host{h:02d}" for h in range(HOSTS)]
    checkpoints = [{"name": f"ckpt{c:02d}", "path": f"ckpt{c:02d}", "weights": "random"} for c in range(CHECKPOINTS)]
    plans = {
        "nightly": [
            {"probe": "carrier", "hosts": names, "checkpoints": "all", "config": {"seq_len": 4096, "steps": 20}},
            {"probe": "profile", "hosts": names, "checkpoints": ["ckpt00"], "config": {"seq_lens": [1024, 2048, 4096]}},
            {"probe": "mask", "hosts": names[:1], "checkpoints": "all", "config": {"seq_len": 1024}},
            {"probe": "padding", "hosts": names[:1], "corpus": "lab"},
            {"probe": "bucket", "hosts": names[:1], "corpus": "lab"},
        ]
    }
    lab = {
        "store": {"root": str(store)},
        "hosts": hosts,
        "checkpoints": checkpoints,
        "corpora": [{"name": "lab", "path": "corpus.jsonl"}],
        "plans": plans,
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(lab, sort_keys=False))
    return path


def run_compare(cluster: Path, *extra: str) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, *extra, "-m", "runner.cli", "compare", "--probe", "carrier", "--cluster", str(cluster)],
        capture_output=True,
        text=True,
        env=env,
        cwd=cluster.parent,
    )
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(f"compare failed ({out.returncode}): {out.stderr[-2000:]}")
    return took, out


def heaviest(importtime: str, n: int = 8) -> list[str]:
    rows = []
    for line in importtime.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[1].strip().isdigit():
            rows.append((int(parts[1]), parts[2].rstrip()))
    top = [r for r in rows if not r[1].startswith("  ")]  # top-level imports only
    return [f"{us / 1e6:.3f} s {name.strip()}" for us, name in sorted(top, reverse=True)[:n]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--root", type=Path, help="build here (default: a temporary folder)")
    args = parser.parse_args()
    folder = args.root or Path(tempfile.mkdtemp(prefix="labprobe-bench-compare-"))
    store = folder / "store"
    if not (store / "tables" / "jobs").is_dir():
        took = build(Store(store), 0, args.nights, HOSTS, CHECKPOINTS)
        print(f"built {args.nights} nights ({args.nights * HOSTS * CHECKPOINTS:,} jobs) in {took:.0f} s")
    cluster = cluster_file(folder, store)
    run_compare(cluster)  # warm the page cache
    walls = [run_compare(cluster)[0] for _ in range(args.repeat)]
    _, timed = run_compare(cluster, "-X", "importtime")
    torch = any(line.rstrip().endswith("| torch") for line in timed.stderr.splitlines())
    print(f"load average (1 min): {os.getloadavg()[0]:.1f}")
    print(f"compare --probe carrier, {HOSTS} hosts: median {statistics.median(walls):.2f} s, min {min(walls):.2f} s")
    print(f"torch imported: {torch}")
    print("heaviest top-level imports:", *heaviest(timed.stderr), sep="\n  ")


if __name__ == "__main__":
    main()
