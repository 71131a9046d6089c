"""`labprobe status`: the sweep holding a store's lock, its run and plan, its jobs done and left (from the
lock file and the jobs table); the newest run when none is running; a missing store is exit 2."""

from __future__ import annotations

from datetime import datetime, timezone

from runner.cli import main
from runner.dispatch.lock import SweepLock
from runner.store.rows import JobKey
from runner.store.store import Store


def _job(store: Store, run_id: str, n: int, status: str) -> None:
    now = datetime(2026, 12, 4, 20, n, tzinfo=timezone.utc)
    key = JobKey(
        run_id=run_id,
        job_id=f"job{n}",
        probe="mask",
        host="local",
        checkpoint=f"ck{n}",
        checkpoint_fp="fp",
        config_hash="cfg",
        code_version="v",
        finished_at=now,
    )
    store.write_job(key, status=status, started_at=now, wall_s=1.0, summary={}, config={}, env={}, plan="demo")


def test_status_names_the_running_sweep_and_its_jobs_done_and_left(tmp_path, capsys):
    store = Store(tmp_path / "store")
    _job(store, "older-run", 0, "ok")
    with SweepLock(store.root, run_id="run-a", plan="demo") as lock:
        lock.update(num_jobs=5, already_done=2)
        _job(store, "run-a", 1, "ok")
        _job(store, "run-a", 2, "skipped")
        assert main(["status", "--store", str(store.root)]) == 0
    out = capsys.readouterr().out
    assert "sweep running: run run-a, plan 'demo'" in out
    assert "2 of 5 done (1 ok, 0 failed, 1 skipped), 3 left; 2 already stored ok before this run" in out
    assert "last: skipped mask ck2 @ local" in out
    assert main(["status", "--store", str(store.root)]) == 0  # released: the newest run, nothing running
    assert "no sweep running; newest run run-a: 2 job(s) stored (1 ok, 0 failed, 1 skipped)" in capsys.readouterr().out


def test_status_of_a_missing_store_is_one_line_exit_2(tmp_path, capsys):
    assert main(["status", "--store", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such directory" in err
