"""The sweep lock (atomic, stale when its pid is dead) and the deadline's nearest-occurrence rule."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from probes.result import InputError
from runner.sweeplock import SweepLock, parse_deadline

TZ = timezone(timedelta(hours=1))


@pytest.mark.parametrize("now, deadline, expected", [
    (datetime(2026, 12, 3, 22, 0, tzinfo=TZ), "07:00", datetime(2026, 12, 4, 7, 0, tzinfo=TZ)),   # overnight
    (datetime(2026, 12, 3, 6, 0, tzinfo=TZ), "07:00", datetime(2026, 12, 3, 7, 0, tzinfo=TZ)),    # later today
    (datetime(2026, 12, 3, 7, 30, tzinfo=TZ), "07:00", datetime(2026, 12, 3, 7, 0, tzinfo=TZ)),   # a late start: past
    (datetime(2026, 12, 3, 23, 30, tzinfo=TZ), "00:30", datetime(2026, 12, 4, 0, 30, tzinfo=TZ)),  # across midnight
    (datetime(2026, 12, 4, 1, 0, tzinfo=TZ), "23:30", datetime(2026, 12, 3, 23, 30, tzinfo=TZ)),   # just past
])
def test_deadline_is_the_nearest_occurrence(now, deadline, expected):
    assert parse_deadline(deadline, now=now) == expected.timestamp()


def test_bad_deadline_is_bad_input():
    for text in ("7", "24:00", "07:60", "tomorrow"):
        with pytest.raises(InputError, match="--deadline"):
            parse_deadline(text)


def test_lock_is_exclusive_and_released(tmp_path):
    first = SweepLock(tmp_path, run_id="r1", plan="demo")
    first.acquire()
    held = json.loads((tmp_path / ".sweep.lock").read_text())
    assert (held["pid"], held["run_id"], held["plan"]) == (os.getpid(), "r1", "demo") and held["started_at"]
    with pytest.raises(InputError, match=f"pid {os.getpid()} .* run r1, plan 'demo'"):
        SweepLock(tmp_path, run_id="r2", plan="demo").acquire()
    first.release()
    with SweepLock(tmp_path, run_id="r3", plan="demo"):
        assert json.loads((tmp_path / ".sweep.lock").read_text())["run_id"] == "r3"
    assert not (tmp_path / ".sweep.lock").exists()


def test_a_dead_pids_lock_is_taken_over_and_another_hosts_is_respected(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / ".sweep.lock"
    lock.write_text(json.dumps({"pid": dead.pid, "host": os.uname().nodename, "run_id": "old", "plan": "p"}))
    with SweepLock(tmp_path, run_id="new", plan="p"):
        assert json.loads(lock.read_text())["run_id"] == "new"
    lock.write_text(json.dumps({"pid": dead.pid, "host": "some-other-host", "run_id": "old", "plan": "p"}))
    with pytest.raises(InputError, match="on some-other-host"):
        SweepLock(tmp_path, run_id="new", plan="p").acquire()
