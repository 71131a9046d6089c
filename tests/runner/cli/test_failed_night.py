"""A failed night is a row: a sweep that cannot reach its cluster, misses its deadline or dies leaves a run
record with the reason, and the morning's `labprobe status` and `labprobe report` lead with it. A malformed
cluster file is bad input: exit 2 and nothing written."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sweep_util import write_cluster

from runner import cli
from runner.analysis.report_runs import write_run
from runner.cli import sweep as sweep_cli
from runner.cli.stores import open_store

REPO = Path(__file__).resolve().parents[3]
PLANS = {"small": [{"probe": "mask", "config": {"seq_len": 64}, "hosts": ["gx10"], "checkpoints": ["qwen3-0.6b-base"]}]}


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    return write_cluster(tmp_path_factory.mktemp("lab"), PLANS)


def morning(capsys, lab: Path, store: Path) -> tuple[str, str]:
    """The first lines of `status` and `report` the next morning."""
    assert cli.main(["status", "--cluster", str(lab), "--store", str(store)]) == 0
    status = capsys.readouterr().out
    assert cli.main(["report", "--cluster", str(lab), "--store", str(store)]) == 0
    report = capsys.readouterr().out
    return status.splitlines()[0], report.splitlines()[0]


def records(store: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((store / "runs").glob("*.json"))]


def test_a_night_that_cannot_reach_its_cluster_is_a_run_with_the_reason(lab, tmp_path, capsys):
    with socket.socket() as s:  # a port of this machine where nothing listens
        s.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{s.getsockname()[1]}"
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    argv = ["sweep", "--cluster", str(lab), "--plan", "small", "--store", str(store), "--address", address]
    proc = subprocess.run(  # its own process: the tests' shared Ray, if up, would be joined in this one
        [sys.executable, "-m", "runner.cli", *argv, "--connect-timeout-s", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=REPO,
    )
    assert proc.returncode == 2 and "nothing listens there" in proc.stderr
    (record,) = records(store)
    assert record["outcome"] == "failed" and address in record["reason"] and record["plan"] == "small"
    status, report = morning(capsys, lab, store)
    for first in (status, report):
        assert first.startswith(f"run {record['run_id']} (plan 'small', started ") and " FAILED: Ray address " in first
    html = (store / "reports" / f"{record['run_id']}.html").read_text()
    assert 'class="alert"><b>run ' in html and "FAILED: Ray address" in html


def test_a_night_past_its_deadline_is_incomplete(lab, tmp_path, capsys):
    store = tmp_path / "store"
    past = (datetime.now() - timedelta(minutes=5)).strftime("%H:%M")  # within the last 12 h: already past
    argv = ["sweep", "--cluster", str(lab), "--plan", "small", "--store", str(store), "--inline", "gx10"]
    assert cli.main([*argv, "--deadline", past]) == 0  # skipped by the deadline: not a failed job
    capsys.readouterr()
    (record,) = records(store)
    assert record["outcome"] == "incomplete" and record["reason"].startswith("the deadline passed with 1 job(s)")
    status, report = morning(capsys, lab, store)
    assert " INCOMPLETE: the deadline passed with 1 job(s) not started" in status and status == report


def test_a_sweep_that_dies_says_so_and_one_killed_without_a_word_too(lab, tmp_path, capsys, monkeypatch):
    store = tmp_path / "store"

    def dies(**_):
        raise RuntimeError("the driver lost its mind")

    monkeypatch.setattr(sweep_cli, "run_sweep", dies)
    argv = ["sweep", "--cluster", str(lab), "--plan", "small", "--store", str(store), "--inline", "gx10"]
    with pytest.raises(RuntimeError):
        cli.main(argv)
    capsys.readouterr()
    status, report = morning(capsys, lab, store)
    assert " DIED: RuntimeError: the driver lost its mind" in status and status == report
    # a sweep killed with SIGKILL records nothing more than its start: no lock held, so it died
    write_run(open_store(store, None), "20991231T235900Z-dead", plan="small", work=[])
    status, _ = morning(capsys, lab, store)
    assert status.startswith("run 20991231T235900Z-dead (plan 'small'") and "DIED: it ended without recording" in status


def test_a_malformed_cluster_file_is_bad_input_with_nothing_written(tmp_path, capsys):
    bad = tmp_path / "cluster.yaml"
    bad.write_text("store: {root: store}\nhosts: [{name: gx10, address: a, gpus: lots}]\nplans: {}\n")
    assert cli.main(["sweep", "--cluster", str(bad), "--plan", "small"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "gpus" in err
    assert not (tmp_path / "store").exists()
