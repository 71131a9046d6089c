"""`labprobe report`: the morning report of any run from the store, the same page as `sweep --report`.

A rerun whose jobs were all done stores no job row; its report shows the stored answers it relied on,
marked with their run, with their plots (the store of tests/runner/analysis/test_report.py, and a real
padding sweep run twice)."""

from __future__ import annotations

import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml
from test_report import CARRIERS, LAST_RUN, build_lab_store

from runner.analysis.answers import WORK_KEY
from runner.analysis.report_runs import RUNS, write_run
from runner.cli import main as labprobe
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
RERUN = "night-5"


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Path:
    """The lab's store, and a rerun of the last night's plan that found every job done."""
    root = tmp_path_factory.mktemp("lab") / "results"
    store = build_lab_store(root)
    jobs = store.jobs()
    work = list(jobs[jobs["run_id"] == LAST_RUN][list(WORK_KEY)].itertuples(index=False, name=None))
    write_run(store, RERUN, plan="nightly", work=work, outcome="ok")
    return root


def report(root: Path, *args: str, capsys) -> tuple[int, str, str, str]:
    # no cluster file (the repo's would lead the text with its budget's verdict): the run's own lines first
    code = labprobe(["report", "--store", str(root), "--cluster", str(root / "no-cluster.yaml"), *args])
    out, err = capsys.readouterr()
    path = Path(out.strip().splitlines()[-1].removeprefix("report: ")) if code == 0 else None
    return code, out, err, path.read_text(encoding="utf-8") if path else ""


def test_a_reruns_report_shows_the_answers_it_relied_on_with_their_run(lab, capsys):
    code, out, _, page = report(lab, "--run", RERUN, capsys=capsys)
    assert code == 0
    assert f"run {RERUN}: ran no job (all already stored); answers of earlier runs shown: night-3, {LAST_RUN}" in out
    assert page.count("<img") == len(CARRIERS) + 4  # carriers, scaling, kernels, padding, bucket
    assert f"earlier: run {LAST_RUN}" in page and "No value" not in page
    assert f"earlier: {LAST_RUN}" in page  # the raw rows say their run
    assert (lab / "reports" / f"{RERUN}.html").is_file()


def test_without_the_runs_record_the_rerun_has_nothing_to_show(lab, tmp_path, capsys):
    """What the record is for: the same store without it knows nothing of the rerun's plan."""
    shutil.copytree(lab, tmp_path / "results", ignore=shutil.ignore_patterns(RUNS))
    code, _, err, _ = report(tmp_path / "results", "--run", RERUN, capsys=capsys)
    assert code == 2 and f"no run {RERUN!r}" in err


def test_the_newest_run_by_default_and_a_run_by_id(lab, capsys):
    assert report(lab, capsys=capsys)[1].startswith(f"run {RERUN}:")
    code, out, _, page = report(lab, "--run", LAST_RUN, capsys=capsys)
    assert code == 0 and out.startswith(f"run {LAST_RUN}: ") and "drift alerts: 1" in out
    assert page.count("<img") == len(CARRIERS) + 4


def test_a_night_is_noon_to_noon_local_time(lab, capsys):
    started = datetime.now().astimezone().replace(hour=23, minute=30, second=0, microsecond=0)  # local
    run_id = started.astimezone(timezone.utc).strftime("%Y%m%dT%H%M%SZ") + "-ab12"  # as new_run_id names it
    write_run(Store(lab), run_id, plan="nightly", work=[], outcome="ok")
    try:
        code, out, _, _ = report(lab, "--night", started.date().isoformat(), capsys=capsys)
        assert code == 0 and out.startswith(f"run {run_id}:"), out
        code, _, err, _ = report(lab, "--night", (started.date() + timedelta(days=1)).isoformat(), capsys=capsys)
        assert code == 2 and "no run started in the night of" in err
    finally:
        (lab / RUNS / f"{run_id}.json").unlink()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--run", "night-99"], "--run: no run 'night-99'"),
        (["--night", "yesterday"], "--night: expected a date YYYY-MM-DD"),
        (["--run", RERUN, "--night", "2026-12-04"], "not allowed with argument"),
    ],
)
def test_bad_input_is_one_line_exit_2(lab, args, message, capsys):
    code, _, err, _ = report(lab, *args, capsys=capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_an_empty_store_says_so(tmp_path, capsys):
    code, _, err, _ = report(tmp_path, capsys=capsys)
    assert code == 2 and "no runs stored yet" in err


def test_a_store_that_is_a_file_says_so(tmp_path, capsys):
    (tmp_path / "store").write_text("not a store")
    code, _, err, _ = report(tmp_path / "store", capsys=capsys)
    assert code == 2 and "is a file, not a store directory" in err and len(err.strip().splitlines()) == 1, err


def test_sweep_report_of_a_rerun_shows_the_stored_answers_and_plots(tmp_path, capsys):
    """The issue's case: a sweep whose jobs were all done, with --report, is not a near-empty page."""
    lab = yaml.safe_load((REPO / "cluster.yaml").read_text())
    lab["store"] = {"root": str(tmp_path / "store")}
    for host in lab["hosts"]:
        host.update({k: str(REPO / v) for k, v in host.items() if k.endswith("_root") and not v.startswith("/")})
    lab["plans"]["cpu"] = [{"probe": "padding", "hosts": ["local"], "corpus": "demo"}]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(lab, sort_keys=False))
    sweep = ["sweep", "--inline", "local", "--plan", "cpu", "--cluster", str(tmp_path / "cluster.yaml"), "--report"]
    assert labprobe(sweep) == 0
    first = capsys.readouterr().out
    assert labprobe(sweep) == 0
    out = capsys.readouterr().out
    # One padding job per checkpoint of the demo lab (an entry without `checkpoints` takes them all).
    num_jobs = len(lab["checkpoints"])
    assert f": {num_jobs} ok, 0 failed, 0 skipped, 0 already done" in first
    assert f"0 ok, 0 failed, 0 skipped, {num_jobs} already done" in out
    first_run = first.split("run ", 1)[1].split(":", 1)[0]
    assert f"ran no job (all already stored); answers of earlier runs shown: {first_run}" in out
    page = Path(out.strip().splitlines()[-1].removeprefix("report: ")).read_text(encoding="utf-8")
    assert "padding: pad fraction per batching strategy" in page and page.count("<img") == 1
    assert f"All from run {first_run}, stored before this run." in page and "No value" not in page
    # `labprobe report --run` of that rerun is the same page
    rerun = out.split("run ", 1)[1].split(":", 1)[0]
    assert labprobe(["report", "--run", rerun, "--cluster", str(tmp_path / "cluster.yaml")]) == 0


def test_the_newest_run_is_the_last_finished_not_the_last_id_in_sort_order():
    """A recorded sample's run ids (`recorded-...`) sort after every sweep's ids; the newest run is the one
    whose jobs finished last (a run known only by its record: the start its id names)."""
    import types

    import pandas as pd

    from runner.analysis.report_runs import known_runs

    jobs = pd.DataFrame(
        {
            "run_id": ["recorded-20261204T1357Z", "20261204T202645Z-14be", "20261203T070000Z-aaaa"],
            "finished_at": ["2026-12-04T13:57:00+00:00", "2026-12-04T20:27:03+00:00", "2026-12-03T07:05:00+00:00"],
        }
    )
    no_records = types.SimpleNamespace(place=types.SimpleNamespace(files=lambda rel: {}))  # a store of jobs only
    runs = known_runs(no_records, jobs)
    assert runs == ["20261203T070000Z-aaaa", "recorded-20261204T1357Z", "20261204T202645Z-14be"]
