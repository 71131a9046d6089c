"""Sweeps under faults, on the shared real Ray cluster: a node removed mid-sweep, a sweep killed with
SIGKILL, a second concurrent sweep, a deadline in the past, a writer killed mid-file. Each time the
store keeps everything it had, readers never see a partial file, and the next run does only what is
missing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sweep_util import assert_kept, snapshot, write_cluster
from tiny_lab import TINY, add_tiny_checkpoints

from runner import cli
from runner.clock import new_run_id
from runner.dispatch.launch import RayLauncher
from runner.dispatch.lock import holder as lock_holder
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store

HOST_LABEL = "labprobe.host"
# The jobs run on two config-only checkpoints (tiny_lab): what is under test is the sweep, not the model.
MASK = {"probe": "mask", "config": {"seq_len": 64}, "checkpoints": list(TINY)}
MASK2 = {"probe": "mask", "config": {"seq_len": 96}, "checkpoints": list(TINY)}
PLANS = {
    "doom": [{**MASK, "hosts": ["gx10", "doomed"]}, {**MASK2, "hosts": ["gx10", "doomed"]}],
    # One host: the killed sweep is its own Ray job, so its workers start cold (torch imports); it runs its
    # jobs one at a time (KILLED_SWEEP), in one worker that imports them once.
    "kill": [{**MASK, "hosts": ["gx10"]}, {**MASK2, "hosts": ["gx10"]}],
    "small": [{**MASK, "hosts": ["gx10"], "checkpoints": [TINY[0]]}],
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, ray_cluster):
    path = write_cluster(tmp_path_factory.mktemp("lab"), PLANS, extra_hosts=[{"name": "doomed"}])
    add_tiny_checkpoints(path)
    return path


def slow_on_doomed(job, **kwargs):
    """The job function, slowed on host `doomed` so the test can remove its node mid-sweep."""
    import time

    from runner.dispatch.launch import execute

    if job.host == "doomed":
        time.sleep(1.5)
    return execute(job, **kwargs)


def sweep_jobs(lab: Path, plan: str, store: Path, **kwargs):
    cluster = load_cluster(lab)
    return run_sweep(
        cluster=cluster,
        store=Store(store),
        plan=plan,
        jobs=expand(cluster, plan),
        run_id=new_run_id(),
        progress=False,
        **kwargs,
    )


def test_node_removed_mid_sweep_fails_its_unfinished_jobs_and_the_next_run_finishes_them(lab, ray_cluster, tmp_path):
    store = Store(tmp_path)
    node = ray_cluster.add_node(num_cpus=1, labels={HOST_LABEL: "doomed"})
    ray_cluster.wait_for_nodes()

    def remove_after_first_doomed_job():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            jobs = store.jobs()
            if len(jobs) and ((jobs["host"] == "doomed") & (jobs["status"] == "ok")).any():
                ray_cluster.remove_node(node)
                return
            time.sleep(0.1)

    remover = threading.Thread(target=remove_after_first_doomed_job)
    remover.start()
    t0 = time.monotonic()
    counts = sweep_jobs(lab, "doom", tmp_path, launcher=RayLauncher(fn=slow_on_doomed))
    remover.join()
    assert time.monotonic() - t0 < 120
    jobs = store.jobs()
    doomed, others = jobs[jobs["host"] == "doomed"], jobs[jobs["host"] != "doomed"]
    assert set(others["status"]) == {"ok"} and len(others) == 4
    assert len(doomed) == 4 and (doomed["status"] == "ok").sum() >= 1
    failed = doomed[doomed["status"] == "failed"]
    assert len(failed) >= 1 and (failed["reason"].str.len() > 0).all(), failed["reason"]
    assert counts.failed == len(failed)
    before = snapshot(tmp_path)

    node = ray_cluster.add_node(num_cpus=1, labels={HOST_LABEL: "doomed"})
    try:
        ray_cluster.wait_for_nodes()
        again = sweep_jobs(lab, "doom", tmp_path)
    finally:
        ray_cluster.remove_node(node)
    assert (again.ok, again.failed, again.already_done) == (len(failed), 0, 8 - len(failed))
    assert_kept(before, snapshot(tmp_path))
    assert Store(tmp_path).done_job_ids() == set(Store(tmp_path).latest_jobs()["job_id"])


KILLED_SWEEP = textwrap.dedent("""
    import sys, ray
    from runner.lab.cluster import load_cluster
    from runner.dispatch.launch import RayLauncher
    from runner.lab.plan import expand
    from runner.store.store import Store
    from runner.cli.sweep import new_run_id, run_sweep
    from runner.dispatch.lock import SweepLock

    def slow(job, **kwargs):
        import time
        from runner.dispatch.launch import execute
        time.sleep(1.0)
        return execute(job, **kwargs)

    ray.init(address=sys.argv[1], log_to_driver=False)
    cluster, store = load_cluster(sys.argv[2]), Store(sys.argv[3])
    run_id = new_run_id()
    with SweepLock(store.root, run_id=run_id, plan="kill"):
        # each job takes both of gx10's CPUs: one at a time, in one worker (one cold start, not two at once)
        run_sweep(cluster=cluster, store=store, plan="kill", jobs=expand(cluster, "kill"), run_id=run_id,
                  launcher=RayLauncher(fn=slow, num_cpus=2), progress=False)
""")


def test_a_killed_sweep_is_resumed_with_only_the_missing_jobs(lab, ray_cluster, tmp_path, capsys):
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_SWEEP, ray_cluster.address, str(lab), str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    store = Store(tmp_path)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and (not (tmp_path / "tables" / "jobs").is_dir() or store.jobs().empty):
            assert proc.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.1)
    finally:
        proc.kill()
        proc.wait()
    assert lock_holder(tmp_path) is None  # the kernel dropped the killed sweep's lock
    done = store.done_job_ids()
    assert 1 <= len(done) < 4
    before = snapshot(tmp_path)
    assert cli.main(["sweep", "--cluster", str(lab), "--plan", "kill", "--store", str(tmp_path)]) == 0
    assert f"{4 - len(done)} ok, 0 failed, 0 skipped, {len(done)} already done" in capsys.readouterr().out
    jobs = Store(tmp_path).jobs()
    assert jobs.groupby("job_id")["status"].apply(lambda s: (s == "ok").sum()).eq(1).all()
    assert jobs["job_id"].nunique() == 4
    assert_kept(before, snapshot(tmp_path))
    assert lock_holder(tmp_path) is None


HOLDER = (
    "import sys, time\nfrom runner.dispatch.lock import SweepLock\n"
    "SweepLock(sys.argv[1], run_id='r-holder', plan='nightly').acquire()\nprint('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_second_sweep_exits_at_once_naming_the_running_one(lab, tmp_path, capsys):
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        assert cli.main(["sweep", "--cluster", str(lab), "--plan", "small", "--store", str(tmp_path)]) == 2
        assert time.monotonic() - t0 < 5
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"another sweep is running on this store: pid {holder.pid}" in err and "run r-holder" in err
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / "tables" / "jobs").exists()
    # Its holder is dead now: the kernel dropped its lock and the next sweep takes it.
    assert cli.main(["sweep", "--cluster", str(lab), "--plan", "small", "--store", str(tmp_path)]) == 0
    assert len(Store(tmp_path).jobs()) == 1 and lock_holder(tmp_path) is None


def test_a_deadline_in_the_past_skips_every_unstarted_job(lab, tmp_path):
    past = (datetime.now() - timedelta(minutes=5)).strftime("%H:%M")
    assert (
        cli.main(["sweep", "--cluster", str(lab), "--plan", "kill", "--store", str(tmp_path), "--deadline", past]) == 0
    )
    jobs = Store(tmp_path).jobs()
    assert len(jobs) == 4 and set(jobs["status"]) == {"skipped"} and set(jobs["reason"]) == {"deadline"}
    assert not (tmp_path / "tables" / "mask.layers").exists()
