"""A year of nightly compaction with and without the sweep's vacuum: bytes on disk (issue 28).

    PYTHONPATH=. python benchmarks/bench_vacuum.py [--nights 365] [--root DIR]

The lab of benchmarks/store_history.py (20 hosts x 10 checkpoint names, a new checkpoint each a
night: 200 carrier jobs, 2 rows each, and their job rows), built night by night through the store's
writer and compacted as every sweep does (Store.compact). After each night's compaction the files it
replaced are listed (vacuum's dry run at 0 days), their bytes summed, then deleted (Store.vacuum(0)),
so the disk holds only the live files and the run stays small. Compaction does not depend on
vacuum (it reads only the live files), so from the same run:

- without vacuum: live bytes + every night's replaced bytes so far (no file is ever deleted);
- with the sweep's vacuum at `vacuum_retention_days` 7: live bytes + the replaced bytes of the last
  7 nights (older ones are deleted by the next sweep's vacuum);
- with a 0-day retention: the live bytes (measured on disk).

Printed per quarter and at the end; data files only (the logs are kept 7 days by their own retention).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from benchmarks.store_history import night_records
from runner.store.maintain import vacuum
from runner.store.store import Store

HOSTS, CHECKPOINTS, RETENTION_NIGHTS = 20, 10, 7


def data_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in (root / "tables").rglob("*.parquet") if "_delta_log" not in p.parts)


def replaced_bytes(store: Store) -> int:
    """Bytes of the files no current version needs (what vacuum at 0 days deletes), measured before."""
    listed = vacuum(store, 0, dry_run=True)
    total = 0
    for name, files in listed.items():
        folder = store.root / "tables" / name
        total += sum((folder / f).stat().st_size for f in files if (folder / f).exists())
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=365)
    parser.add_argument("--root", type=Path)
    args = parser.parse_args()
    root = args.root or Path(tempfile.mkdtemp(prefix="labprobe-bench-vacuum-"))
    store = Store(root)
    replaced: list[int] = []
    t0 = time.perf_counter()
    for night in range(args.nights):
        rows, jobs = night_records(night, HOSTS, CHECKPOINTS)
        store.write_rows("carrier.carriers", rows)
        store.write_rows("jobs", jobs)
        store.compact()
        replaced.append(replaced_bytes(store))
        store.vacuum(0)
        if (night + 1) % 91 == 0 or night + 1 == args.nights:
            live = data_bytes(root)
            week = sum(replaced[-RETENTION_NIGHTS:])
            print(
                f"night {night + 1:3d} ({time.perf_counter() - t0:4.0f} s): live {live / 2**20:8.1f} MiB | "
                f"without vacuum {(live + sum(replaced)) / 2**30:6.2f} GiB | "
                f"with the sweep's vacuum (7 days) {(live + week) / 2**20:8.1f} MiB | "
                f"replaced last night {replaced[-1] / 2**20:6.1f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
