"""`sweep --inline` honours --timeout-s: a job still running then is stopped (an alarm in this process)
and stored failed with the Ray launcher's reason (a job ran 142-150 s past --timeout-s 15)."""

from __future__ import annotations

import time
from pathlib import Path

from runner.cli import main
from runner.dispatch import launch
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store

REPO_YAML = Path(__file__).resolve().parents[3] / "cluster.yaml"


def test_an_inline_job_past_its_timeout_is_stopped_and_failed_as_ray_fails_it(monkeypatch):
    def slow(job, **kwargs):  # a probe busy in Python: a loop, not one long sleep
        for _ in range(3000):
            time.sleep(0.01)
        return launch.Outcome(status="ok")

    monkeypatch.setattr(launch, "execute", slow)
    job = expand(load_cluster(REPO_YAML), "demo")[0].with_fingerprint("fp")
    launcher = launch.InlineLauncher(timeout_s=0.3)
    t0 = time.monotonic()
    launcher.submit(job, deadline=None)
    ((got, outcome),) = launcher.poll(0)
    assert time.monotonic() - t0 < 5 and got is job
    assert (outcome.status, outcome.reason) == ("failed", "timeout: not finished within 0.3 s")
    # a job within its time is untouched, and no alarm outlives it (it would raise in here)
    monkeypatch.setattr(launch, "execute", lambda job, **kwargs: (time.sleep(0.1), launch.Outcome(status="ok"))[1])
    launcher.submit(job, deadline=None)
    time.sleep(0.6)
    assert launcher.poll(0)[0][1].status == "ok"


def test_sweep_inline_fails_every_job_past_timeout_s_with_the_ray_wording(tmp_path, capsys):
    t0 = time.monotonic()
    code = main(
        ["sweep", "--cluster", str(REPO_YAML), "--inline", "local", "--store", str(tmp_path), "--timeout-s", "0.01"]
    )
    assert code == 1, capsys.readouterr().err
    jobs = Store(tmp_path).jobs()
    ran = jobs[jobs["status"] != "skipped"]  # GPU jobs on a machine without one are skipped before they start
    # mask builds a model's attention from its config: never within 10 ms. A padding job after a bucket job
    # of the same tokenizer and corpus can be (it reads the token lengths that job cached on disk): it may be ok.
    mask = ran[ran["probe"] == "mask"]
    assert len(mask) >= 2 and set(mask["status"]) == {"failed"}
    failed = ran[ran["status"] == "failed"]
    assert set(failed["reason"]) == {"timeout: not finished within 0.01 s"}
    assert set(ran[ran["status"] == "ok"]["probe"]) <= {"padding", "bucket"}
    assert time.monotonic() - t0 < 120
