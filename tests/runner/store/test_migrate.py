"""`labprobe store migrate` on a real store of the older layout (tests/data/legacy_store, written by the
Store of caf3f1e), and the upkeep commands check, compact, vacuum on real Delta tables."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from deltalake import DeltaTable
from sweep_util import snapshot

from runner import cli
from runner.store.store import Store

LEGACY = Path(__file__).resolve().parents[2] / "data" / "legacy_store"
STRAYS = {"empty.parquet", "garbage.parquet", "notes.txt", "foreign.parquet"}


@pytest.fixture
def legacy(tmp_path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(LEGACY, root)
    return root


def old_rows(root: Path, name: str) -> pd.DataFrame:
    """What the older layout holds, read file by file with plain pyarrow (strays left out)."""
    tables = []
    for path in sorted((root / name).rglob("*.parquet")):
        if path.name in STRAYS:
            continue
        table = pq.read_table(path)
        tables += [
            table.append_column("host", pa.array([path.parent.parent.name[5:]] * len(table))).append_column(
                "checkpoint", pa.array([path.parent.name[11:]] * len(table))
            )
        ]
    return pa.concat_tables(tables, promote_options="permissive").to_pandas()


def same(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    cols = sorted(a.columns)
    key = ["job_id", "run_id"] + [c for c in ("seq_len", "layer", "name") if c in cols]
    a, b = (f[cols].sort_values(key).reset_index(drop=True) for f in (a, b))
    pd.testing.assert_frame_equal(a, b, check_dtype=False)
    return True


def test_migrate_carries_every_row_skips_strays_and_leaves_the_old_tree(legacy, capsys):
    before = snapshot(legacy)
    store = Store(legacy)
    with pytest.raises(Exception, match="labprobe store migrate"):
        store.jobs()
    assert cli.main(["store", "migrate", "--store", str(legacy), "--cluster", "/none"]) == 0
    out = capsys.readouterr().out
    for stray in ("empty.parquet", "garbage.parquet", "notes.txt"):
        assert f"jobs/host=gx10/checkpoint=qwen3-0.6b/{stray}" in out
    assert out.count("foreign.parquet: foreign schema") == 2
    # The old tree is untouched (nothing removed, nothing rewritten).
    after = snapshot(legacy)
    assert {k: v for k, v in after.items() if k in before} == before
    store = Store(legacy)
    assert sorted(store.table_names()) == ["carrier.carriers", "jobs", "mask.checks", "mask.layers"]
    for name in ("jobs", "carrier.carriers", "mask.layers", "mask.checks"):
        migrated = DeltaTable(str(legacy / "tables" / name)).to_pandas()  # everything, orphans included
        assert same(migrated, old_rows(legacy, name))
    # Read through the store: the orphan stays out, the null-then-float column merged.
    carriers = store.read("carrier.carriers")
    assert "car-orphan" not in set(carriers["job_id"]) and len(carriers) == 7 * 2
    assert carriers["note"].isna().sum() == 4 * 2 and set(carriers["note"].dropna()) == {1.5}
    assert set(carriers["row_checkpoint"]) == {"/models/qwen3-0.6b", "/models/gemma-3-4b"}
    assert len(store.jobs()) == 9 and store.done_job_ids() == {
        "car-gx10-qwen3-0.6b",
        "car-gx10-gemma-3-4b",
        "car-ana-ml2-qwen3-0.6b",
        "mask-gx10",
    }
    # Again: nothing new to add, nothing doubled.
    assert cli.main(["store", "migrate", "--store", str(legacy), "--cluster", "/none"]) == 0
    assert (
        len(Store(legacy).jobs()) == 9
        and len(DeltaTable(str(legacy / "tables" / "carrier.carriers")).to_pandas()) == 15
    )
    assert cli.main(["store", "check", "--store", str(legacy), "--cluster", "/none"]) == 0
    assert (
        "older layout at the root: carrier.carriers, jobs, mask.checks, mask.layers (migrated"
        in capsys.readouterr().out
    )


def test_compare_history_and_report_read_the_migrated_store(legacy, capsys):
    assert cli.main(["store", "migrate", "--store", str(legacy), "--cluster", "/none"]) == 0
    capsys.readouterr()
    assert cli.main(["compare", "--probe", "carrier", "--store", str(legacy), "--cluster", "/none", "--json"]) == 0
    out = capsys.readouterr().out
    import json

    result = json.loads(out)
    # ana-ml2/gemma-3-4b: its newest run failed, so that cell is empty (compare's rule), the rest shown.
    cells = {(r["checkpoint"], h): v for r in result["rows"] for h, v in r["values"].items()}
    assert ("gemma-3-4b", "ana-ml2") not in cells and ("gemma-3-4b", "gx10") in cells
    assert cli.main(
        ["history", "--probe", "carrier", "--store", str(legacy), "--cluster", "/none", "--host", "gx10"]
    ) in (0, 1)
    from runner.analysis.report import write_report

    path, text = write_report(Store(legacy), "20261102T020000Z-bbbb")
    assert path.is_file() and "4 job(s) on 2 host(s)" in text and "1 failed" in text


def test_compact_checkpoints_and_vacuum_keeps_the_retention(tmp_path, capsys):
    from datetime import datetime, timezone

    from runner.store.store import JobKey

    store = Store(tmp_path)
    for n in range(6):
        key = JobKey(
            run_id="r",
            job_id=f"j{n}",
            probe="carrier",
            host="gx10",
            checkpoint="c",
            checkpoint_fp="f",
            config_hash="h",
            code_version="v",
            finished_at=datetime(2026, 12, 3, 0, n, tzinfo=timezone.utc),
        )
        store.write_table(key, "t", [{"x_s": float(n)}])
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1, summary={}, config={}, env={})
    rows = store.read("carrier.t")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "store": {"root": str(tmp_path), "vacuum_retention_days": 0},
                "hosts": [{"name": "gx10", "address": "127.0.0.1"}],
            }
        )
    )
    assert cli.main(["store", "compact", "--cluster", str(cluster)]) == 0
    assert "carrier.t" in capsys.readouterr().out
    table = DeltaTable(str(tmp_path / "tables" / "carrier.t"))
    assert (
        len(table.file_uris()) == 1
        and (tmp_path / "tables" / "carrier.t" / "_delta_log" / "_last_checkpoint").is_file()
    )
    assert same(Store(tmp_path).read("carrier.t"), rows)
    # Nothing new: compact touches nothing (no commit, no checkpoint rewritten).
    before = snapshot(tmp_path / "tables")
    assert cli.main(["store", "compact", "--cluster", str(cluster)]) == 0
    assert snapshot(tmp_path / "tables") == before
    files = [p for p in (tmp_path / "tables" / "carrier.t").glob("*.parquet")]
    assert len(files) == 7  # the six small ones kept for time travel, plus the compacted one
    # The default retention (7 days) keeps them; the lab's 0 days lets vacuum delete them.
    assert cli.main(["store", "vacuum", "--cluster", str(cluster), "--retention-days", "7"]) == 0
    assert "deleted 0 file(s)" in capsys.readouterr().out
    # Vacuum never deletes a file younger than an hour (a writer may be about to commit it): age them.
    hours_ago = time.time() - 2 * 3600
    for path in (tmp_path / "tables").rglob("*.parquet"):
        os.utime(path, (hours_ago, hours_ago))
    assert cli.main(["store", "vacuum", "--cluster", str(cluster), "--dry-run"]) == 0
    assert (
        "would delete" in capsys.readouterr().out
        and len(list((tmp_path / "tables" / "carrier.t").glob("*.parquet"))) == 7
    )
    assert cli.main(["store", "vacuum", "--cluster", str(cluster)]) == 0
    assert len(list((tmp_path / "tables" / "carrier.t").glob("*.parquet"))) == 1
    assert same(Store(tmp_path).read("carrier.t"), rows)
    assert cli.main(["store", "vacuum", "--cluster", str(cluster), "--retention-days", "-1"]) == 2
    assert os.path.exists(tmp_path / ".sweep.lock")  # compact/vacuum held the sweep's lock
