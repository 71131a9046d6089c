"""The store's chores under attack: `store check` on broken and non-stores, `compact` with a data file
gone, `vacuum` with a retention that is not a number of days or beside a writer that holds no lock,
and `store check` run again and again as separate processes (it used to abort with exit 134)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from deltalake import DeltaTable

from runner import cli
from runner.store.store import JobKey, Store

REPO = Path(__file__).resolve().parents[3]
WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timezone
    from runner.store.store import JobKey, Store

    store, first, rows, run = Store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
    for n in range(first, first + int(sys.argv[4])):
        key = JobKey(run_id=run, job_id=f"k{n}", probe="carrier", host="gx10", checkpoint="c",
                     checkpoint_fp="f", config_hash="h", code_version="v", finished_at=datetime.now(timezone.utc))
        store.write_table(key, "big", [{"i": i, "text": "x" * 100} for i in range(rows)])
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})
        print(key.job_id, flush=True)
""")


def writer(root: Path, first: int, rows: int, jobs: int, run: str = "r1", **kw) -> subprocess.Popen:
    """A process committing jobs k<first>.. of run `run`, holding no lock (as another client would)."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(first), str(rows), str(jobs), run],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        text=True,
        **kw,
    )


def store_cmd(capsys, action: str, root: Path, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["store", action, "--store", str(root), "--cluster", str(root.parent / "none.yaml"), *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def small_store(root: Path, num_jobs: int = 3) -> None:
    assert writer(root, 0, 3, num_jobs, stdout=subprocess.DEVNULL).wait(120) == 0


def newest_commit(root: Path, table: str = "jobs") -> Path:
    return max((root / "tables" / table / "_delta_log").glob("*.json"))


def test_check_finds_an_emptied_newest_commit_that_drops_a_job_row(tmp_path, capsys):
    small_store(tmp_path)
    assert store_cmd(capsys, "check", tmp_path)[0] == 0
    victim = newest_commit(tmp_path)
    victim.write_bytes(b"")
    assert len(Store(tmp_path).jobs()) == 2  # delta-rs reads on, one job row short
    code, out, _ = store_cmd(capsys, "check", tmp_path)
    assert code == 1 and f"unreadable: {victim}: empty commit file" in out, out


@pytest.mark.parametrize("cut", ["after the commitInfo line", "mid-line"])
def test_check_finds_a_truncated_newest_commit(tmp_path, capsys, cut):
    small_store(tmp_path)
    victim = newest_commit(tmp_path)
    data = victim.read_bytes()
    victim.write_bytes(data[: data.index(b"\n") + 1] if cut.startswith("after") else data[: len(data) // 2])
    code, out, _ = store_cmd(capsys, "check", tmp_path)
    assert code == 1 and f"unreadable: {victim}: " in out and "truncated" in out, out
    assert "carrier.big" in out  # the other table is listed all the same


def test_check_names_a_commit_nested_too_deeply_to_parse(tmp_path, capsys):
    small_store(tmp_path)
    victim = newest_commit(tmp_path)
    victim.write_bytes(b"[" * 100_000)  # json raises RecursionError here: the checker died with a traceback
    code, out, err = store_cmd(capsys, "check", tmp_path)
    assert code == 1 and "Traceback" not in err and f"unreadable: {victim}: line 1 is not JSON" in out, out + err


def test_check_lists_every_table_when_one_log_is_broken(tmp_path, capsys):
    small_store(tmp_path)
    (tmp_path / "tables" / "jobs" / "_delta_log" / "00000000000000000000.json").write_text("{not json")
    newest_commit(tmp_path, "carrier.big").write_text("")
    code, out, err = store_cmd(capsys, "check", tmp_path)
    assert code == 1 and "Traceback" not in err, err
    rows = {line.split()[0]: line.split()[1] for line in out.splitlines()[3:5]}
    assert set(rows) == {"carrier.big", "jobs"}, out
    assert "line 1 is not JSON" in out and "empty commit file" in out


@pytest.mark.parametrize("what", ["missing", "a file", "an empty folder"])
@pytest.mark.parametrize("action", ["check", "compact", "vacuum"])
def test_a_store_path_that_is_not_a_store_is_exit_2_and_left_as_it_was(tmp_path, capsys, what, action):
    root = tmp_path / "store"
    if what == "a file":
        root.write_text("not a store")
    elif what == "an empty folder":
        root.mkdir()
    code, out, err = store_cmd(capsys, action, root)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"store {root}: " in err, (out, err)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ([] if what == "missing" else ["store"])


def test_compact_with_a_data_file_missing_is_one_line_exit_2(tmp_path, capsys):
    small_store(tmp_path)
    gone = Path(DeltaTable(str(tmp_path / "tables" / "carrier.big")).file_uris()[0])
    gone.unlink()
    code, _, err = store_cmd(capsys, "compact", tmp_path)
    assert code == 2 and len(err.strip().splitlines()) == 1 and gone.name in err and "Traceback" not in err, err


@pytest.mark.parametrize("days", ["inf", "nan", "-1", "1e400"])
def test_vacuum_refuses_a_retention_that_is_not_a_finite_number_of_days(tmp_path, capsys, days):
    small_store(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    code, _, err = store_cmd(capsys, "vacuum", tmp_path, f"--retention-days={days}")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "--retention-days: expected a finite" in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_zero_day_vacuum_beside_a_writer_without_the_lock_loses_nothing(tmp_path, capsys):
    small_store(tmp_path, 2)
    proc = writer(tmp_path, 2, 3, 40, run="r2", stdout=subprocess.PIPE)
    num_vacuums = 0
    while proc.poll() is None:
        code, _, err = store_cmd(capsys, "vacuum", tmp_path, "--retention-days", "0")
        assert code == 0, err
        num_vacuums += 1
    assert proc.returncode == 0 and num_vacuums >= 3
    written = proc.stdout.read().split()
    code, out, _ = store_cmd(capsys, "check", tmp_path)
    assert code == 0, out
    jobs = Store(tmp_path).jobs()
    assert set(written) <= set(jobs["job_id"]) and len(jobs) == 42


def test_vacuum_deletes_what_no_version_needs_once_old_enough_and_keeps_the_rest(tmp_path, capsys):
    small_store(tmp_path, 6)
    assert store_cmd(capsys, "compact", tmp_path)[0] == 0
    folder = tmp_path / "tables" / "carrier.big"
    live = {Path(u).name for u in DeltaTable(str(folder)).file_uris()}
    replaced = {p.name for p in folder.glob("*.parquet")} - live
    assert len(live) == 1 and len(replaced) == 6
    code, out, _ = store_cmd(capsys, "vacuum", tmp_path, "--retention-days", "0")
    assert code == 0 and "deleted 0 file(s)" in out, out  # younger than an hour: a writer may be mid-commit
    hours_ago = time.time() - 2 * 3600
    for path in tmp_path.rglob("*.parquet"):
        os.utime(path, (hours_ago, hours_ago))
    code, out, _ = store_cmd(capsys, "vacuum", tmp_path, "--retention-days", "0")
    assert code == 0 and {p.name for p in folder.glob("*.parquet")} == live, out
    assert store_cmd(capsys, "check", tmp_path)[0] == 0 and len(Store(tmp_path).jobs()) == 6


def many_tables(root: Path) -> None:
    """A store like the demo's: a jobs table and eight probe tables, a few commits each."""
    store = Store(root)
    for n in range(3):
        key = JobKey(
            run_id="r1", job_id=f"j{n}", probe="p", host="h", checkpoint="c", checkpoint_fp="f",
            config_hash="x", code_version="v", finished_at=datetime.now(timezone.utc),
        )  # fmt: skip
        for t in range(8):
            store.write_table(key, f"t{t}", [{"i": i, "s": "x" * 50} for i in range(20)])
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})


def test_store_check_never_aborts_in_30_runs(tmp_path):
    many_tables(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-m", "runner.cli", "store", "check", "--store", str(tmp_path)]
    codes = []
    lock = threading.Lock()

    def one() -> None:
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        with lock:
            codes.append((proc.returncode, proc.stderr[-200:]))

    for _ in range(15):  # two at a time: 30 runs in the time of 15
        pair = [threading.Thread(target=one) for _ in range(2)]
        for t in pair:
            t.start()
        for t in pair:
            t.join()
    assert [c for c in codes if c[0] != 0] == [] and len(codes) == 30
