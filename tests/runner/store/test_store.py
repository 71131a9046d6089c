"""The store: real Delta tables written, read back (by labprobe, pandas and pyarrow) and compared;
a job row commits its job; nothing rewritten; new columns merge; strays never break reads."""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta, timezone

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from probes.result import Check, InputError, ProbeResult
from runner.store.store import JOB, KEY_COLUMNS, SLOT, JobKey, Store, StoreError, latest

T0 = datetime(2026, 12, 3, tzinfo=timezone.utc)


@dataclasses.dataclass(frozen=True)
class Cfg:
    seq_len: int = 8


@dataclasses.dataclass(frozen=True)
class Row:
    seq_len: int
    step_s: float


def key(job="j1", run="r1", host="gx10", checkpoint="qwen3-0.6b", when=1, fp="fp0") -> JobKey:
    return JobKey(
        run_id=run,
        job_id=job,
        probe="carrier",
        host=host,
        checkpoint=checkpoint,
        checkpoint_fp=fp,
        config_hash="c0",
        code_version="v0",
        finished_at=datetime(2026, 12, 3, 0, when, tzinfo=timezone.utc),
    )


def result(step_s=0.5) -> ProbeResult:
    return ProbeResult(
        probe="carrier",
        config=Cfg(),
        tables={"results": [Row(8, step_s), Row(16, 1.0)]},
        summary={"step_s": step_s},
        checks=[Check(name="c", ok=True, detail="")],
        artifacts={"timings.txt": "0.5 0.5\n"},
    )


def ok_job(store, k, **kw):
    store.write_job(k, status="ok", started_at=T0, wall_s=1, summary={}, config={}, env={}, **kw)


def test_result_round_trips_with_key_columns_as_columns_and_plain_readers_see_it(tmp_path):
    store = Store(tmp_path)
    store.write_result(key(), result(), started_at=T0, wall_s=1.5, env={"torch": "2.13"})
    store.write_result(key(job="j2", host="ana-ml2"), result(0.7), started_at=T0, wall_s=2.0, env={})
    table = store.read("carrier.results")
    assert len(table) == 4
    assert set(KEY_COLUMNS) <= set(table.columns)
    by_host = table.groupby("host")["step_s"].apply(sorted).to_dict()
    assert by_host == {"gx10": [0.5, 1.0], "ana-ml2": [0.7, 1.0]}
    assert (table["checkpoint"] == "qwen3-0.6b").all()
    # One Delta table per probe table, no host/checkpoint folders: the README's one-liners read it.
    folder = tmp_path / "tables" / "carrier.results"
    assert (folder / "_delta_log").is_dir() and not list(folder.glob("host=*"))
    frame = DeltaTable(str(folder)).to_pandas()
    arrow = DeltaTable(str(folder)).to_pyarrow_table()
    key_cols = ["job_id", "host", "seq_len", "step_s"]
    expect = table[key_cols].sort_values(key_cols).reset_index(drop=True)
    assert frame[key_cols].sort_values(key_cols).reset_index(drop=True).equals(expect)
    assert arrow.to_pandas()[key_cols].sort_values(key_cols).reset_index(drop=True).equals(expect)
    assert (tmp_path / "artifacts" / "j1" / "r1" / "timings.txt").read_text() == "0.5 0.5\n"
    jobs = store.jobs()
    assert sorted(jobs["status"]) == ["ok", "ok"] and store.done_job_ids() == {"j1", "j2"}
    assert store.table_names() == ["carrier.results", "jobs"]
    assert set(DeltaTable(str(tmp_path / "tables" / "jobs")).to_pandas()["job_id"]) == {"j1", "j2"}


def test_each_table_of_a_job_is_one_commit_and_the_job_row_the_last(tmp_path):
    store = Store(tmp_path)
    store.write_result(key(), result(), started_at=T0, wall_s=1.5, env={})
    for name in ("carrier.results", "jobs"):
        history = DeltaTable(str(tmp_path / "tables" / name)).history()
        assert [h["operation"] for h in history] == ["WRITE"], history
    results_time = DeltaTable(str(tmp_path / "tables" / "carrier.results")).history()[0]["timestamp"]
    assert DeltaTable(str(tmp_path / "tables" / "jobs")).history()[0]["timestamp"] >= results_time


def test_never_rewrites_and_latest_job_wins(tmp_path):
    store = Store(tmp_path)
    store.write_job(key(when=1), status="failed", reason="boom", started_at=T0, wall_s=1, summary={}, config={}, env={})
    with pytest.raises(StoreError):
        ok_job(store, key(when=1))
    with pytest.raises(StoreError):  # another Store on the same root knows it too (read from the table)
        ok_job(Store(tmp_path), key(when=1))
    assert store.done_job_ids() == set()
    ok_job(store, key(run="r2", when=2))
    assert store.done_job_ids() == {"j1"}
    assert len(store.jobs()) == 2 and list(store.latest_jobs()["run_id"]) == ["r2"]


def test_latest_is_one_notion_per_job_or_per_slot():
    rows = [
        ("j1", "r1", "fp0", 1, "ok"),
        ("j1", "r2", "fp0", 2, "failed"),
        ("j2", "r3", "fp1", 3, "ok"),  # the same checkpoint name, re-fingerprinted: a new job
        ("j3", "r1", "fp0", 1, "ok"),
        ("j3", "r0", "fp0", 1, "failed"),
    ]  # a finished_at tie
    jobs = pd.DataFrame(
        [
            {
                "job_id": j,
                "run_id": r,
                "checkpoint_fp": fp,
                "status": s,
                "probe": "carrier",
                "host": "gx10" if j != "j3" else "ana-ml2",
                "checkpoint": "q",
                "config_hash": "c",
                "finished_at": T0 + timedelta(minutes=m),
            }
            for j, r, fp, m, s in rows
        ]
    )
    per_job = latest(jobs, JOB).set_index("job_id")
    assert per_job["run_id"].to_dict() == {"j1": "r2", "j2": "r3", "j3": "r1"}  # ties: the later run id
    per_slot = latest(jobs, SLOT).set_index("host")
    assert per_slot.loc["gx10", "job_id"] == "j2" and per_slot.loc["ana-ml2", "run_id"] == "r1"


def test_tables_of_a_job_whose_job_row_never_came_are_not_read(tmp_path):
    store = Store(tmp_path)
    store.write_table(key(job="orphan"), "results", [{"step_s": 9.0}])  # writer died before its job row
    store.write_result(key(job="whole"), result(), started_at=T0, wall_s=1, env={})
    frame = store.read("carrier.results")
    assert set(frame["job_id"]) == {"whole"} and sorted(frame["step_s"]) == [0.5, 1.0]
    assert list(store.read("carrier.results", columns=["step_s"]).columns) == ["step_s"]


def test_a_new_column_merges_and_older_rows_read_null(tmp_path):
    store = Store(tmp_path)
    for job, row in (("a", {"x": None, "y": 1}), ("b", {"x": 2.5, "y": 2}), ("c", {"x": 3, "y": 3, "z": "new"})):
        store.write_table(key(job=job), "t", [row])
        ok_job(store, key(job=job))
    frame = store.read("carrier.t").sort_values("y")
    assert frame["x"].isna().tolist() == [True, False, False] and frame["x"].tolist()[1:] == [2.5, 3.0]
    assert frame["z"].isna().tolist() == [True, True, False]
    # A key column added later (the way `variant` will come): older rows null, the newest set.
    store.write_table(key(job="d"), "t", [{"x": 1.0, "y": 4, "variant": "bf16"}])
    ok_job(store, key(job="d"), plan="p")
    frame = store.read("carrier.t").sort_values("y")
    assert frame["variant"].isna().tolist() == [True, True, True, False]
    assert store.jobs().set_index("job_id").loc["d", "plan"] == "p"


def test_a_type_the_table_cannot_take_is_refused_naming_the_table_never_cut(tmp_path):
    store = Store(tmp_path)
    store.write_table(key(job="a"), "t", [{"x": 1.5, "n": 1}])
    with pytest.raises(StoreError, match="carrier.t"):
        store.write_table(key(job="b"), "t", [{"x": "text"}])
    with pytest.raises(StoreError, match="column 'n' holds double values"):  # 2.5 is not stored as 2
        store.write_table(key(job="c"), "t", [{"x": 1.0, "n": 2.5}])
    store.write_table(key(job="d"), "t", [{"x": 3, "n": 4.0}])  # lossless: 3 -> 3.0, 4.0 -> 4
    for job in "ad":
        ok_job(store, key(job=job))
    frame = store.read("carrier.t").sort_values("x")
    assert frame["x"].tolist() == [1.5, 3.0] and frame["n"].tolist() == [1, 4]


def test_a_row_column_named_like_a_key_is_kept_apart(tmp_path):
    store = Store(tmp_path)
    store.write_table(
        key(checkpoint="family"),
        "carriers",
        [{"checkpoint": "qwen3-0.6b", "step_s": 1.0}, {"checkpoint": "qwen3-4b", "step_s": 2.0}],
    )
    ok_job(store, key(checkpoint="family"))
    frame = store.read("carrier.carriers")
    assert list(frame["checkpoint"]) == ["family", "family"]
    assert sorted(frame["row_checkpoint"]) == ["qwen3-0.6b", "qwen3-4b"]


def test_empty_store_reads_empty(tmp_path):
    store = Store(tmp_path)
    assert store.read("jobs").empty and store.done_job_ids() == set() and store.table_names() == []
    assert store.latest_jobs("carrier").empty and store.columns("jobs") == []


def test_a_store_that_does_not_exist_is_named_not_read_as_empty(tmp_path):
    store = Store(tmp_path / "nothing")
    for read in (lambda: store.read("jobs"), store.table_names, lambda: store.latest_jobs("carrier")):
        with pytest.raises(InputError, match="nothing: no such directory"):
            read()
    assert store.done_job_ids() == set()  # a sweep's question before its first write
    assert not (tmp_path / "nothing").exists()


def test_stray_files_never_break_reads_and_a_stray_folder_is_named_once(tmp_path, caplog):
    store = Store(tmp_path)
    store.write_result(key(), result(), started_at=T0, wall_s=1, env={})
    jobs_dir, results_dir = tmp_path / "tables" / "jobs", tmp_path / "tables" / "carrier.results"
    (jobs_dir / "empty.parquet").write_bytes(b"")
    (jobs_dir / "garbage.parquet").write_bytes(bytes(range(256)))
    (jobs_dir / "notes.txt").write_text("hello\n")
    (jobs_dir / "host=gx10").mkdir()
    pq.write_table(pa.table({"job_id": pa.array([None], pa.string()), "status": ["ok"]}), jobs_dir / "foreign.parquet")
    pq.write_table(pa.table({"x": [1.0]}), results_dir / "foreign.parquet")
    (tmp_path / "tables" / "notes").mkdir()
    (tmp_path / "tables" / "notes" / "a.parquet").write_bytes(b"")
    caplog.set_level(logging.WARNING, logger="labprobe.store")
    fresh = Store(tmp_path)
    assert fresh.done_job_ids() == {"j1"} and len(fresh.jobs()) == 1
    assert len(fresh.read("carrier.results")) == 2
    assert fresh.table_names() == ["carrier.results", "jobs"]
    assert fresh.table_names() == ["carrier.results", "jobs"]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "tables/notes" in warnings[0], warnings
    # `labprobe store check` names the stray folder and counts the files no version uses.
    from runner.store.maintain import check

    state = check(Store(tmp_path))
    assert state.ok and state.strays == ["notes"]
    assert {t.name: t.other_files for t in state.tables} == {"jobs": 4, "carrier.results": 1}


def test_a_store_in_the_older_layout_is_refused_with_the_way_out(tmp_path):
    (tmp_path / "jobs" / "host=gx10" / "checkpoint=c").mkdir(parents=True)
    store = Store(tmp_path)
    for call in (store.done_job_ids, lambda: ok_job(store, key())):
        with pytest.raises(InputError, match="labprobe store migrate"):
            call()
    assert not (tmp_path / "tables").exists()


def test_a_url_root_keeps_its_scheme_even_through_path(tmp_path):
    from pathlib import Path

    for root in ("s3://bucket/lab/results", Path("s3://bucket/lab/results")):
        store = Store(root, storage_options={"aws_region": "eu-west-1"})
        assert (store.uri, store.local) == ("s3://bucket/lab/results", False)
        assert store.table_uri("jobs") == "s3://bucket/lab/results/tables/jobs"
    assert Store(f"file://{tmp_path}").root == tmp_path
