"""The store: real Parquet files written, read back and compared; atomic, never rewritten."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import signal
import time
from datetime import datetime, timezone

import pyarrow.dataset as ds
import pytest

from probes.result import Check, ProbeResult
from runner.store.store import KEY_COLUMNS, JobKey, Store, StoreError


@dataclasses.dataclass(frozen=True)
class Cfg:
    seq_len: int = 8


@dataclasses.dataclass(frozen=True)
class Row:
    seq_len: int
    step_s: float


def key(job="j1", run="r1", host="gx10", checkpoint="qwen3-0.6b", when=1) -> JobKey:
    return JobKey(run_id=run, job_id=job, probe="carrier", host=host, checkpoint=checkpoint,
                  checkpoint_fp="fp0", config_hash="c0", code_version="v0",
                  finished_at=datetime(2026, 12, 3, 0, when, tzinfo=timezone.utc))


def result(step_s=0.5) -> ProbeResult:
    return ProbeResult(probe="carrier", config=Cfg(), tables={"results": [Row(8, step_s), Row(16, 1.0)]},
                       summary={"step_s": step_s}, checks=[Check(name="c", ok=True, detail="")],
                       artifacts={"timings.txt": "0.5 0.5\n"})


def test_result_round_trips_with_key_columns_and_hive_partitions(tmp_path):
    store = Store(tmp_path)
    started = datetime(2026, 12, 3, tzinfo=timezone.utc)
    store.write_result(key(), result(), started_at=started, wall_s=1.5, env={"torch": "2.13"})
    store.write_result(key(job="j2", host="ana-ml2"), result(0.7), started_at=started, wall_s=2.0, env={})
    table = store.read("carrier.results")
    assert len(table) == 4
    assert set(KEY_COLUMNS) <= set(table.columns)
    by_host = table.groupby("host")["step_s"].apply(sorted).to_dict()
    assert by_host == {"gx10": [0.5, 1.0], "ana-ml2": [0.7, 1.0]}
    assert (table["checkpoint"] == "qwen3-0.6b").all()
    path = tmp_path / "carrier.results" / "host=gx10" / "checkpoint=qwen3-0.6b" / "j1-r1.parquet"
    assert path.is_file()
    # A plain pyarrow.dataset reader, with nothing of ours, sees the same rows.
    plain = ds.dataset(tmp_path / "carrier.results", format="parquet", partitioning="hive").to_table()
    assert plain.num_rows == 4
    assert (tmp_path / "artifacts" / "j1" / "r1" / "timings.txt").read_text() == "0.5 0.5\n"
    jobs = store.jobs()
    assert sorted(jobs["status"]) == ["ok", "ok"] and store.done_job_ids() == {"j1", "j2"}
    assert store.table_names() == ["carrier.results", "jobs"]


def test_never_rewrites_and_latest_job_wins(tmp_path):
    store = Store(tmp_path)
    t0 = datetime(2026, 12, 3, tzinfo=timezone.utc)
    store.write_job(key(when=1), status="failed", reason="boom", started_at=t0, wall_s=1,
                    summary={}, config={}, env={})
    with pytest.raises(StoreError):
        store.write_job(key(when=1), status="ok", started_at=t0, wall_s=1, summary={}, config={}, env={})
    assert store.done_job_ids() == set()
    store.write_job(key(run="r2", when=2), status="ok", started_at=t0, wall_s=1, summary={}, config={}, env={})
    assert store.done_job_ids() == {"j1"}
    assert len(store.jobs()) == 2 and list(store.latest_jobs()["run_id"]) == ["r2"]


def test_tables_of_a_job_whose_job_row_never_came_are_not_read(tmp_path):
    store = Store(tmp_path)
    t0 = datetime(2026, 12, 3, tzinfo=timezone.utc)
    store.write_table(key(job="orphan"), "results", [{"step_s": 9.0}])  # writer died before its job row
    store.write_result(key(job="whole"), result(), started_at=t0, wall_s=1, env={})
    frame = store.read("carrier.results")
    assert set(frame["job_id"]) == {"whole"} and sorted(frame["step_s"]) == [0.5, 1.0]
    assert list(store.read("carrier.results", columns=["step_s"]).columns) == ["step_s"]


def test_reads_unify_columns_typed_differently_across_files(tmp_path):
    store = Store(tmp_path)
    t0 = datetime(2026, 12, 3, tzinfo=timezone.utc)
    for job, row in (("a", {"x": None, "y": 1}), ("b", {"x": 2.5, "y": 2})):
        store.write_table(key(job=job), "t", [row])
        store.write_job(key(job=job), status="ok", started_at=t0, wall_s=1, summary={}, config={}, env={})
    frame = store.read("carrier.t").sort_values("y")
    assert frame["x"].isna().tolist() == [True, False] and frame["x"].iloc[1] == 2.5


def test_a_row_column_named_like_a_key_is_kept_apart(tmp_path):
    store = Store(tmp_path)
    store.write_table(key(checkpoint="family"), "carriers", [{"checkpoint": "qwen3-0.6b", "step_s": 1.0},
                                                             {"checkpoint": "qwen3-4b", "step_s": 2.0}])
    store.write_job(key(checkpoint="family"), status="ok", started_at=datetime(2026, 12, 3, tzinfo=timezone.utc),
                    wall_s=1, summary={}, config={}, env={})
    frame = store.read("carrier.carriers")
    assert list(frame["checkpoint"]) == ["family", "family"]
    assert sorted(frame["row_checkpoint"]) == ["qwen3-0.6b", "qwen3-4b"]


def test_empty_store_reads_empty(tmp_path):
    store = Store(tmp_path / "nothing")
    assert store.read("jobs").empty and store.done_job_ids() == set() and store.table_names() == []


def _write_forever(root: str, ready) -> None:
    store = Store(root)
    big = [{"i": i, "text": "x" * 200} for i in range(200_000)]
    ready.set()
    for n in range(1000):
        store.write_table(key(job=f"k{n}"), "big", big)


def test_a_process_killed_while_writing_leaves_nothing_readers_see(tmp_path):
    ready = multiprocessing.Event()
    proc = multiprocessing.Process(target=_write_forever, args=(str(tmp_path), ready))
    proc.start()
    ready.wait(30)
    folder = tmp_path / "carrier.big" / "host=gx10" / "checkpoint=qwen3-0.6b"
    deadline = time.monotonic() + 30
    # Kill it while a temp file is being written (after at least one complete file).
    while time.monotonic() < deadline:
        names = os.listdir(folder) if folder.is_dir() else []
        if any(n.startswith(".") for n in names) and any(n.endswith(".parquet") and not n.startswith(".") for n in names):
            break
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join()
    names = os.listdir(folder)
    assert any(n.startswith(".") for n in names), "the kill should land mid-write"
    complete = [n for n in names if not n.startswith(".")]
    # What any plain Parquet reader sees (no job rows here, so below the store's own filter).
    frame = ds.dataset(tmp_path / "carrier.big", format="parquet").to_table(columns=["job_id", "i"]).to_pandas()
    assert len(frame) == 200_000 * len(complete)
    assert frame.groupby("job_id")["i"].count().eq(200_000).all()
