"""done_job_ids(among=...): a sweep's plan answered from its jobs' rows only (bloom filters on
job_id, a filtered read), the same answer as the full done-set for those ids, on a real store
with reruns, failures, skips, ties and both compacted and per-job files, by either filtered read."""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, QueryBuilder

from runner.store import delta
from runner.store import store as store_module
from runner.store.store import CorruptStoreError, JobKey, Store, job_record

T0 = datetime(2026, 12, 4, tzinfo=timezone.utc)


def key(job: str, run: str, minute: int) -> JobKey:
    return JobKey(
        run_id=run,
        job_id=job,
        probe="carrier",
        host="gx10",
        checkpoint="qwen3-0.6b",
        checkpoint_fp="fp0",
        config_hash="c0",
        code_version="v0",
        finished_at=T0 + timedelta(minutes=minute),
    )


def write(store: Store, job: str, run: str, minute: int, status: str) -> None:
    store.write_job(key(job, run, minute), status=status, started_at=T0, wall_s=1.0, summary={}, config={}, env={})


def bulk(store: Store, night: int, num: int) -> list[str]:
    """`num` jobs of one night in one commit (a history), every 7th failed; -> their ids."""
    run = f"2026120{night}T010000Z-bulk"
    ids = [hashlib.sha256(f"{night}-{n}".encode()).hexdigest()[:16] for n in range(num)]
    records = [
        job_record(
            key(i, run, night * 1000 + n),
            status="failed" if n % 7 == 0 else "ok",
            started_at=T0,
            wall_s=1.0,
            summary={},
            config={},
            env={},
        )
        for n, i in enumerate(ids)
    ]
    store.write_rows("jobs", records)
    return ids


# (job, run, minute, status) in the order written; the newest run of a job is the latest
# (finished_at, run_id), whatever order its rows were written in.
RUNS = [
    ("ok-once", "r1", 1, "ok"),
    ("failed-then-ok", "r1", 2, "failed"),
    ("failed-then-ok", "r2", 12, "ok"),
    ("ok-then-failed", "r1", 3, "ok"),
    ("ok-then-failed", "r2", 13, "failed"),
    ("failed-only", "r1", 4, "failed"),
    ("skipped", "r2", 14, "skipped"),
    ("ok-twice", "r1", 5, "ok"),
    ("ok-twice", "r3", 25, "ok"),
    ("tie-ok-last", "r2", 30, "failed"),
    ("tie-ok-last", "r3", 30, "ok"),
    ("tie-failed-last", "r2", 31, "ok"),
    ("tie-failed-last", "r3", 31, "failed"),
    ("older-time-later-run", "r1", 50, "failed"),
    ("older-time-later-run", "r4", 6, "ok"),
]


def expected_done(rows: list[tuple[str, str, int, str]]) -> set[str]:
    """From first principles: per job its row of greatest (finished_at, run_id); done if ok."""
    newest: dict[str, tuple[int, str, str]] = {}
    for job, run, minute, status in rows:
        if job not in newest or (minute, run) > newest[job][:2]:
            newest[job] = (minute, run, status)
    return {job for job, (_, _, status) in newest.items() if status == "ok"}


def lab_store(root: Path) -> tuple[Store, set[str], list[str]]:
    """A history compacted into row groups, the scenario's runs as per-job commits on top (first
    half before a compaction, the rest after, uncompacted). -> (store, expected done, all ids)."""
    store = Store(root)
    history = []
    for night in range(1, 4):
        ids = bulk(store, night, 300)
        history += [
            (i, f"2026120{night}T010000Z-bulk", night * 1000 + n, "failed" if n % 7 == 0 else "ok")
            for n, i in enumerate(ids)
        ]
    for row in RUNS[:7]:
        write(store, *row)
    store.compact()
    for row in RUNS[7:]:
        write(store, *row)
    rows = history + RUNS
    return store, expected_done(rows), sorted({r[0] for r in rows})


def test_done_among_is_the_full_done_set_for_those_ids(tmp_path, monkeypatch):
    store, done, ids = lab_store(tmp_path)
    assert {"ok-once", "failed-then-ok", "ok-twice", "tie-ok-last"} <= done
    assert not done & {"ok-then-failed", "failed-only", "skipped", "tie-failed-last", "older-time-later-run"}
    full = Store(tmp_path).done_job_ids()
    assert full == done
    scenario = sorted({r[0] for r in RUNS})
    history = [i for i in ids if i not in scenario]
    plans = [scenario, scenario + ["never-stored", "x'quote"], history[::37], history[-40:] + scenario[:3], [], ids]
    for plan in plans:
        assert Store(tmp_path).done_job_ids(among=plan) == full & set(plan), plan
        assert Store(tmp_path).done_job_ids(among=iter(plan)) == full & set(plan)  # any iterable, once
    # A plan past DataFusion's limit is read through a pyarrow filter: the same answer.
    monkeypatch.setattr(store_module, "FILTER_IDS", 3)
    for plan in plans:
        assert Store(tmp_path).done_job_ids(among=plan) == full & set(plan), plan


def test_an_empty_store_has_nothing_done_among_any_plan(tmp_path):
    assert Store(tmp_path).done_job_ids(among=["a", "b"]) == set()
    assert Store(tmp_path).done_job_ids(among=[]) == set()


def test_every_jobs_file_has_a_job_id_bloom_filter_and_the_read_skips_by_it(tmp_path):
    store, _, ids = lab_store(tmp_path)
    table = DeltaTable(str(tmp_path / "tables" / "jobs"))
    files = table.file_uris()
    assert len(files) > 1  # compacted history and per-job files both
    for uri in files:
        meta = pq.ParquetFile(uri).metadata
        column = meta.schema.names.index("job_id")
        for g in range(meta.num_row_groups):
            assert meta.row_group(g).num_rows <= delta.ROW_GROUP_ROWS
            assert meta.row_group(g).column(column).to_dict()["bloom_filter_length"], (uri, g)
    # Ids never stored, hashed like real ones: min/max statistics keep the compacted row groups
    # (their id range spans them), the bloom filters rule every one out; a stored id is kept.
    absent = [hashlib.sha256(f"absent-{n}".encode()).hexdigest()[:16] for n in range(5)]
    total, matched = _bloom_counts(table, absent)
    assert total >= 1 and matched == 0
    assert _bloom_counts(table, [ids[0]])[1] >= 1


def _bloom_counts(table: DeltaTable, plan: list[str]) -> tuple[int, int]:
    """(row groups the statistics kept, of them those the bloom filters kept) for read_ids' query,
    from DataFusion's EXPLAIN ANALYZE metrics."""
    sql = "EXPLAIN ANALYZE " + delta.ids_query(["job_id", "status"], plan)
    text = "\n".join(pa.table(QueryBuilder().register("t", table).execute(sql).read_all()).column(1).to_pylist())
    part = text.split("row_groups_pruned_bloom_filter=")[1].split(",")[0]  # "N total → M matched"
    total, matched = part.split(" total → ")
    return int(total), int(matched.split()[0])


def test_a_corrupt_jobs_file_is_named_by_the_filtered_read_too(tmp_path):
    store, _, ids = lab_store(tmp_path)
    # The compacted file, which holds the history's ids (a file the read skips by the log's
    # statistics, another job's per-job file, is not opened: its rows cannot change this answer).
    victim = max(
        (Path(u) for u in DeltaTable(str(tmp_path / "tables" / "jobs")).file_uris()), key=lambda p: p.stat().st_size
    )
    victim.write_bytes(b"PAR1" + b"\x00" * 40)
    with pytest.raises(CorruptStoreError, match=victim.name):
        Store(tmp_path).done_job_ids(among=ids[:5])
