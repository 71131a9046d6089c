"""The store under faults, with real processes and real files: a writer SIGKILLed mid-commit, a
reader during a compaction, a file the log references but that is corrupt."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable

from runner import cli
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]

WRITER = textwrap.dedent("""
    import sys
    from datetime import datetime, timezone
    from runner.store.store import JobKey, Store

    store, first, rows, run = Store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[5]
    for n in range(first, first + int(sys.argv[4])):
        key = JobKey(run_id=run, job_id=f"k{n}", probe="carrier", host="gx10", checkpoint="c",
                     checkpoint_fp="f", config_hash="h", code_version="v", finished_at=datetime.now(timezone.utc))
        if key.job_id in store.done_job_ids():
            continue
        store.write_table(key, "big", [{"i": i, "text": "x" * 100} for i in range(rows)])
        store.write_job(key, status="ok", started_at=key.finished_at, wall_s=1.0, summary={}, config={}, env={})
        print(key.job_id, flush=True)
""")


def writer(root: Path, first: int, rows: int, jobs: int, run: str = "r1", **kw) -> subprocess.Popen:
    """A process writing jobs k<first>.. of run `run` (a resumed sweep is a new run)."""
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(first), str(rows), str(jobs), run],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        text=True,
        **kw,
    )


def uncommitted(folder: Path) -> list[str]:
    """Files in a table's folder its log does not reference (a commit under way, or left by a kill)."""
    if not (folder / "_delta_log").is_dir():
        return []
    names = [p.name for p in folder.iterdir() if p.is_file()]
    live = {Path(u).name for u in DeltaTable(str(folder)).file_uris()}
    return [n for n in names if n not in live]


def kill_mid_commit(root: Path) -> bool:
    """Run a writer, SIGKILL it while a data file of carrier.big is written but not committed."""
    proc = writer(root, 0, 150_000, 1000, stdout=subprocess.PIPE)
    folder = root / "tables" / "carrier.big"
    try:
        assert proc.stdout.readline().strip() == "k0"  # one whole job first
        seen = set(os.listdir(folder))
        deadline = time.monotonic() + 60
        # A new data file appears before the commit that adds it to the log: kill at once.
        while time.monotonic() < deadline and not set(os.listdir(folder)) - seen:
            time.sleep(0.001)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    return bool(uncommitted(folder))


def test_a_writer_killed_mid_commit_leaves_readable_tables_without_that_job_and_resumes(tmp_path):
    for _ in range(5):  # the kill can land just after the commit; then try again on a fresh store
        root = tmp_path / f"store{_}"
        if kill_mid_commit(root):
            break
    else:
        pytest.fail("never killed the writer mid-commit")
    store = Store(root)
    done = store.done_job_ids()
    rows = store.read("carrier.big", columns=["job_id", "i"])
    assert set(rows["job_id"]) == done and rows.groupby("job_id")["i"].count().eq(150_000).all()
    # The killed job's data file is there but in no log: not a row anywhere, not even to delta-rs.
    assert len(DeltaTable(str(root / "tables" / "carrier.big")).to_pyarrow_table(columns=["job_id"])) % 150_000 == 0
    killed = f"k{len(done)}"
    assert killed not in done
    # Resume: a new writer skips the done jobs and writes the rest, each once.
    # (If the kill fell between the job's table commit and its job row, its rows stay in the table
    # under the killed run, unread: the new run writes the job again beside them.)
    proc = writer(root, 0, 1000, len(done) + 2, "r2", stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.wait(120) == 0, proc.stderr.read()
    jobs = Store(root).jobs()
    assert jobs["job_id"].is_unique and set(jobs["job_id"]) == done | {killed, f"k{len(done) + 1}"}
    assert Store(root).read("carrier.big").groupby("job_id").size()[killed] == 1000  # the new run's only


COMPACT = "import sys\nfrom runner.store.store import Store\nprint('start', flush=True)\nStore(sys.argv[1]).compact()\n"


def test_a_reader_sees_the_same_rows_before_during_and_after_a_compaction(tmp_path):
    proc = writer(tmp_path, 0, 20_000, 40, stdout=subprocess.DEVNULL)
    assert proc.wait(300) == 0
    store = Store(tmp_path)

    def rows():
        frame = store.read("carrier.big", columns=["job_id", "i"])
        return len(frame), frame.groupby("job_id")["i"].sum().to_dict()

    before = rows()
    assert before[0] == 40 * 20_000
    files_before = len(DeltaTable(str(tmp_path / "tables" / "carrier.big")).file_uris())
    compactor = subprocess.Popen(
        [sys.executable, "-c", COMPACT, str(tmp_path)],
        cwd=REPO,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
    )
    assert compactor.stdout.readline().strip() == "start"
    during = []
    while compactor.poll() is None:
        during.append(rows())
    assert compactor.wait() == 0
    after = rows()
    assert during, "no read overlapped the compaction"
    assert all(r == before for r in during) and after == before
    table = DeltaTable(str(tmp_path / "tables" / "carrier.big"))
    assert len(table.file_uris()) < files_before and table.history(1)[0]["operation"] == "OPTIMIZE"


def test_a_corrupt_file_the_log_references_is_one_line_naming_it_exit_2(tmp_path, capsys):
    proc = writer(tmp_path, 0, 10, 3, stdout=subprocess.DEVNULL)
    assert proc.wait(120) == 0
    store = Store(tmp_path)
    victim = Path(DeltaTable(str(tmp_path / "tables" / "carrier.big")).file_uris()[1])
    data = bytearray(victim.read_bytes())
    data[4 : len(data) // 2] = b"\x00" * (len(data) // 2 - 4)  # the footer is whole, the pages are not
    victim.write_bytes(bytes(data))
    argv = ["--store", str(tmp_path), "--cluster", str(tmp_path / "none.yaml")]
    assert cli.main(["history", "--probe", "carrier", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and victim.name in err and "Traceback" not in err, err
    assert cli.main(["store", "check", *argv]) == 1
    out = capsys.readouterr().out
    assert f"unreadable: {victim}" in out or victim.name in out
    # The jobs table's own file: the sweep's done-set and compare say so the same way.
    jobs_file = Path(DeltaTable(str(tmp_path / "tables" / "jobs")).file_uris()[0])
    jobs_file.write_bytes(b"PAR1" + b"\x00" * 40)
    assert cli.main(["compare", "--probe", "carrier", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and jobs_file.name in err and "Traceback" not in err, err
    with pytest.raises(Exception, match=jobs_file.name):
        store.done_job_ids()


def test_a_corrupt_log_is_one_line_naming_the_table_exit_2(tmp_path, capsys):
    proc = writer(tmp_path, 0, 10, 2, stdout=subprocess.DEVNULL)
    assert proc.wait(120) == 0
    newest = max((tmp_path / "tables" / "jobs" / "_delta_log").glob("*.json"))
    newest.write_text("garbage{")
    argv = ["--store", str(tmp_path), "--cluster", str(tmp_path / "none.yaml")]
    assert cli.main(["compare", "--probe", "carrier", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "tables/jobs: its log cannot be read" in err, err
    # store check lists the broken table among the others (runner/store/maintain.py), exit 1.
    assert cli.main(["store", "check", *argv]) == 1
    out = capsys.readouterr().out
    assert "carrier.big" in out and f"unreadable: {newest}: line 1 is not JSON" in out, out
