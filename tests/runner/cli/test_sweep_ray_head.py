"""`labprobe sweep` against a real Ray head of its own, token authentication on (as the product runs):
a missing or wrong token is one line saying so and how to set it; a head killed mid-sweep leaves the
run's unfinished jobs stored failed ("Ray head lost"), the summary printed, exit 1, and none of Ray's
output on the terminal.

One head for the module (started with a token, host label gx10); the last test kills it."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ray_head import RayHead
from sweep_util import write_cluster

from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
TOKEN = secrets.token_hex(16)
# Eight jobs, one at a time (the head offers 1 CPU): some are always in flight or queued at the kill.
PLANS = {"eight": [{"probe": "mask", "config": {"seq_len": n}, "hosts": ["gx10"]} for n in (64, 96, 128, 160)]}
RAY_LOG_LINE = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ [DIWEF] \d+ \d+\]")
"""The prefix of the lines Ray's C++ core writes (`[2026-12-03 18:47:13,484 W 12200 12200] ...`)."""


def base_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    # HOME elsewhere: no ~/.ray/auth_token of this machine's user is picked up by accident.
    return {**env, "HOME": str(tmp), "RAY_AUTH_MODE": "token", "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", **extra}


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    home = tmp_path_factory.mktemp("head-home")
    head = RayHead(env=base_env(home, RAY_AUTH_TOKEN=TOKEN), labels="labprobe.host=gx10")
    yield head
    head.kill()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    return write_cluster(tmp_path_factory.mktemp("lab"), PLANS)


def sweep(lab: Path, address: str, store: Path, env: dict[str, str], **popen):
    cmd = [
        sys.executable,
        "-m",
        "runner.cli",
        "sweep",
        "--cluster",
        str(lab),
        "--plan",
        "eight",
        "--address",
        address,
        "--store",
        str(store),
    ]
    return subprocess.Popen(cmd, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_a_wrong_token_is_one_line_saying_so_and_how_to_set_it(head, lab, tmp_path):
    t0 = time.monotonic()
    proc = sweep(lab, head.address, tmp_path / "store", base_env(tmp_path, RAY_AUTH_TOKEN=secrets.token_hex(16)))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 2, err[-3000:]
    [line] = err.strip().splitlines()
    assert head.address in line and "the Ray token in RAY_AUTH_TOKEN is wrong" in line, line
    assert "RAY_AUTH_TOKEN_PATH" in line and "InvalidAuthToken" in line
    assert out == "" and time.monotonic() - t0 < 60
    assert not (tmp_path / "store" / "tables" / "jobs").exists()


def test_a_missing_token_is_one_line_saying_so(head, lab, tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "runner.cli", "idle", "--cluster", str(lab), "--address", head.address],
        env=base_env(tmp_path),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    [line] = proc.stderr.strip().splitlines()
    assert head.address in line and "no Ray token found" in line and "RAY_AUTH_TOKEN" in line, line


def test_a_head_lost_mid_sweep_stores_the_unfinished_jobs_failed_and_prints_the_summary(head, lab, tmp_path):
    store = Store(tmp_path / "store")
    proc = sweep(lab, head.address, store.root, base_env(tmp_path, RAY_AUTH_TOKEN=TOKEN))
    try:
        deadline = time.monotonic() + 180
        while not ((store.root / "tables" / "jobs").is_dir() and "ok" in set(store.jobs().get("status", []))):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.2)
        head.kill()
        killed_at = time.monotonic()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    took_s = time.monotonic() - killed_at
    assert proc.returncode == 1, err[-3000:]
    assert took_s < 60, took_s  # before Ray's own 60 s, which kills the driver without a word
    jobs = store.jobs()
    assert len(jobs) == 8 and jobs["job_id"].nunique() == 8  # every job of the run has its row
    failed = jobs[jobs["status"] != "ok"]
    assert len(failed) >= 1 and set(failed["status"]) == {"failed"}
    # The job running on the head's own node may see its node die first (the driver's direct link).
    lost = failed["reason"].str.startswith("Ray head lost: ")
    assert lost.any() and (lost | failed["reason"].str.startswith("NodeDiedError")).all(), failed["reason"].tolist()
    num_ok = int((jobs["status"] == "ok").sum())
    assert out.splitlines()[0].startswith(f"run {jobs['run_id'].iloc[0]}: {num_ok} ok, {len(failed)} failed, ")
    # The summary gives one line per cause (sweep.failure_lines): each stored head-lost reason is one.
    for reason, n in failed.loc[lost, "reason"].value_counts().items():
        line = f"  failed, {n} jobs: {reason} (" if n > 1 else f" @ gx10: {reason}"
        assert sum(line in x and "@ gx10" in x for x in out.splitlines()) == 1, (line, out)
    print(f"sweep ended {took_s:.1f} s after the head was killed")
    for text in (out, err):  # Ray's own lines went to the run's log file, not the terminal
        noise = [
            line
            for line in text.splitlines()
            if RAY_LOG_LINE.match(line) or "(raylet)" in line or "[state-dump]" in line
        ]
        assert not noise, text
