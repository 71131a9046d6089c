"""The sweep lock (an flock: exclusive, dropped when its holder dies) and the deadline's nearest-occurrence rule."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta, timezone

import pytest

from probes.result import InputError
from runner.clock import parse_deadline
from runner.dispatch.lock import SweepLock, holder

TZ = timezone(timedelta(hours=1))


@pytest.mark.parametrize(
    "now, deadline, expected",
    [
        (datetime(2026, 12, 3, 22, 0, tzinfo=TZ), "07:00", datetime(2026, 12, 4, 7, 0, tzinfo=TZ)),  # overnight
        (datetime(2026, 12, 3, 6, 0, tzinfo=TZ), "07:00", datetime(2026, 12, 3, 7, 0, tzinfo=TZ)),  # later today
        (
            datetime(2026, 12, 3, 7, 30, tzinfo=TZ),
            "07:00",
            datetime(2026, 12, 3, 7, 0, tzinfo=TZ),
        ),  # a late start: past
        (datetime(2026, 12, 3, 23, 30, tzinfo=TZ), "00:30", datetime(2026, 12, 4, 0, 30, tzinfo=TZ)),  # across midnight
        (datetime(2026, 12, 4, 1, 0, tzinfo=TZ), "23:30", datetime(2026, 12, 3, 23, 30, tzinfo=TZ)),  # just past
    ],
)
def test_deadline_is_the_nearest_occurrence(now, deadline, expected):
    assert parse_deadline(deadline, now=now) == expected.timestamp()


def test_bad_deadline_is_bad_input():
    # "7:05" and " 07:00" were once read here although cluster.yaml and `schedule install` refuse them.
    for text in ("7", "7:05", " 07:00", "24:00", "07:60", "tomorrow"):
        with pytest.raises(InputError, match="--deadline"):
            parse_deadline(text)


def test_lock_is_exclusive_and_released(tmp_path):
    first = SweepLock(tmp_path, run_id="r1", plan="demo")
    first.acquire()
    held = holder(tmp_path)
    assert (held["pid"], held["run_id"], held["plan"]) == (os.getpid(), "r1", "demo") and held["started_at"]
    with pytest.raises(InputError, match=f"pid {os.getpid()} .* run r1, plan 'demo'"):
        SweepLock(tmp_path, run_id="r2", plan="demo").acquire()
    first.release()
    assert holder(tmp_path) is None
    with SweepLock(tmp_path, run_id="r3", plan="demo"):
        assert holder(tmp_path)["run_id"] == "r3"
    assert holder(tmp_path) is None


def test_a_second_sweep_waits_for_the_lock_when_asked_and_refuses_past_its_wait(tmp_path, capsys):
    """--lock-wait-s: another host's sweep on a shared store is waited for, not a failure of the night."""
    first = SweepLock(tmp_path, run_id="r1", plan="a")
    first.acquire()
    threading.Timer(1.0, first.release).start()
    second = SweepLock(tmp_path, run_id="r2", plan="b", wait_s=30)
    t0 = time.monotonic()
    second.acquire()
    assert 0.8 < time.monotonic() - t0 < 10
    assert "waiting up to 30 s: another sweep is running on this store: pid" in capsys.readouterr().err
    t0 = time.monotonic()
    with pytest.raises(InputError, match="another sweep is running on this store.*run r2"):
        SweepLock(tmp_path, run_id="r3", plan="c", wait_s=1.5).acquire()
    assert 1.4 < time.monotonic() - t0 < 5
    second.release()


def test_a_killed_holders_lock_is_free_at_once(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "old", "0"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    assert holder(tmp_path)["run_id"] == "old"
    proc.kill()
    proc.wait()
    assert holder(tmp_path) is None  # the kernel dropped it with the process: nothing stale to judge
    with SweepLock(tmp_path, run_id="new", plan="p"):
        assert holder(tmp_path)["run_id"] == "new"


# Each contender waits at a barrier (a file appearing), tries once, reports, and keeps what it got.
HOLD = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from probes.result import InputError
    from runner.dispatch.lock import SweepLock
    root, run_id, go = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    if go:
        print("ready", flush=True)
        while not (Path(root) / "go").exists():
            pass
    try:
        SweepLock(root, run_id=run_id, plan="p").acquire()
        print("held", flush=True)
    except InputError as exc:
        print("busy " + str(exc), flush=True)
    time.sleep(30)
""")


def test_two_sweeps_racing_for_a_dead_holders_lock_one_wins(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "dead", "0"], stdout=subprocess.PIPE, text=True)
    assert dead.stdout.readline().strip() == "held"
    dead.kill()
    dead.wait()
    for _ in range(5):  # a few rounds: the window a takeover race needs is short
        (tmp_path / "go").unlink(missing_ok=True)
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", HOLD, str(tmp_path), f"r{i}", "1"], stdout=subprocess.PIPE, text=True
            )
            for i in range(2)
        ]
        try:
            assert [p.stdout.readline().strip() for p in procs] == ["ready", "ready"]
            (tmp_path / "go").touch()
            answers = sorted(p.stdout.readline().strip() for p in procs)
            assert answers[1] == "held" and answers[0].startswith("busy another sweep is running on this store")
            assert len(answers[0].splitlines()) == 1
        finally:
            for p in procs:
                p.kill()
                p.wait()


def test_a_store_that_is_a_file_is_bad_input(tmp_path):
    (tmp_path / "store").write_text("not a directory")
    with pytest.raises(InputError, match="cannot hold the sweep lock"):
        SweepLock(tmp_path / "store", run_id="r", plan="p").acquire()


@pytest.mark.parametrize("plant", ["symlink", "link"])
def test_a_link_planted_at_the_lock_never_truncates_the_file_it_names(tmp_path, plant):
    """<store>/.sweep.lock a symlink (or a hard link) to a file outside the store: every sweep, store
    chore and purge truncated that file to 0 bytes and wrote its holder info there."""
    store, victim = tmp_path / "store", tmp_path / "victim"
    store.mkdir()
    victim.write_text("precious\n")
    getattr(os, plant)(victim, store / ".sweep.lock")
    with pytest.raises(InputError, match=r"\.sweep\.lock.*(symbolic link|other names)"):
        SweepLock(store, run_id="r", plan="p").acquire()
    assert victim.read_text() == "precious\n"
    assert holder(store) is None


def test_status_never_waits_on_a_fifo_at_the_lock(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    os.mkfifo(store / ".sweep.lock")
    code = subprocess.run(
        [sys.executable, "-c", "import sys; from runner.dispatch.lock import holder; print(holder(sys.argv[1]))", str(store)],
        capture_output=True, text=True, timeout=30,
        env={**os.environ, "PYTHONPATH": str(__import__("pathlib").Path(__file__).resolve().parents[3])},
    )  # fmt: skip
    assert code.returncode == 0 and code.stdout.strip() == "None", code.stderr
