"""The store on an object store, against a real S3-compatible server (moto_server, started once per session,
authentication on): every command a lab runs on `s3://`, the lock as an object in the bucket, two writers
at once, a missing bucket, wrong credentials, and the server going away mid-sweep."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from moto_util import BUCKET, Gate, newest_rows
from sweep_util import CHECKPOINTS, write_cluster

from runner import cli
from runner.clock import new_run_id
from runner.dispatch.launch import InlineLauncher
from runner.dispatch.lock import SweepLock, holder
from runner.dispatch.spill import read_spill
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.root import LOCK, StoreRoot
from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
LEGACY = REPO / "tests" / "data" / "legacy_store"
MASK = [{"probe": "mask", "config": {"seq_len": n}} for n in (64, 96)]
PLANS = {
    "cpu": [{**MASK[0], "hosts": ["gx10", "ana-ml2"]}],
    "both": [{**m, "hosts": ["gx10", "ana-ml2"]} for m in MASK],
    "gx10": [{**m, "hosts": ["gx10"]} for m in MASK],
}


def lab(folder: Path, prefix: str) -> Path:
    """The test lab's cluster file with its store in the bucket, under `prefix`."""
    folder.mkdir(parents=True, exist_ok=True)
    path = write_cluster(folder, PLANS)
    data = yaml.safe_load(path.read_text())
    data["store"] = {"root": f"s3://{BUCKET}/{prefix}"}
    data["budget"] = {"tokens_per_job": 1_000_000, "arms": 1, "seeds": 1}  # what recommend prices
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def num_layers(checkpoint: str) -> int:
    config = json.loads((REPO / "demo" / "checkpoints" / checkpoint / "config.json").read_text())
    return config.get("num_hidden_layers") or config["text_config"]["num_hidden_layers"]


def no_local_s3_folder(*folders: Path) -> None:
    for folder in folders:
        assert not [p for p in folder.rglob("*") if p.name.startswith("s3:")], f"a local s3: folder under {folder}"


def test_sweep_report_compare_history_and_the_store_chores_on_s3(s3, ray_cluster, tmp_path, monkeypatch, capsys):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    cluster = str(lab(tmp_path / "lab", "e2e"))
    code, out, err = run(capsys, "sweep", "--cluster", cluster, "--plan", "cpu")
    assert code == 0, err
    assert "4 ok, 0 failed, 0 skipped, 0 already done (store s3://lab/e2e)" in out
    run_id = out.split("run ", 1)[1].split(":", 1)[0]
    keys = s3.keys("e2e")
    assert f"e2e/runs/{run_id}.json" in keys and "e2e/tables/jobs/_delta_log/00000000000000000000.json" in keys
    assert f"e2e/{LOCK}" not in keys  # released
    code, out, _ = run(capsys, "status", "--cluster", cluster)
    assert (
        code == 0
        and out.strip()
        == f"store s3://lab/e2e: no sweep running; newest run {run_id}: 4 job(s) stored (4 ok, 0 failed, 0 skipped)"
    )
    code, out, _ = run(capsys, "sweep", "--cluster", cluster, "--plan", "cpu")  # resumed: nothing left to do
    assert code == 0 and "0 ok, 0 failed, 0 skipped, 4 already done" in out
    code, out, _ = run(capsys, "report", "--cluster", cluster, "--run", run_id)
    assert code == 0 and out.strip().endswith(f"report: s3://lab/e2e/reports/{run_id}.html")
    html = s3.client().get_object(Bucket=BUCKET, Key=f"e2e/reports/{run_id}.html")["Body"].read().decode()
    assert html.startswith("<!DOCTYPE html>") and run_id in html
    code, out, _ = run(capsys, "report", "--cluster", cluster, "--run", run_id, "--out", str(tmp_path / "m.html"))
    assert code == 0 and (tmp_path / "m.html").read_text() == html
    code, out, _ = run(capsys, "compare", "--cluster", cluster, "--probe", "mask", "--json")
    assert code == 0 and {"gx10", "ana-ml2"} <= set(json.loads(out)["hosts"])
    code, out, _ = run(capsys, "history", "--cluster", cluster, "--probe", "mask", "--json")
    assert code == 0 and {r["host"] for r in json.loads(out)["rows"]} == {"gx10", "ana-ml2"}

    code, out, err = run(capsys, "recommend", "--cluster", cluster, "--json")  # the answer command
    assert code == 1 and err == "" and json.loads(out)["verdict"] is None  # read the store: no rates in it yet
    code, out, _ = run(capsys, "store", "check", "--cluster", cluster)
    assert code == 0 and "store s3://lab/e2e: 2 table(s)" in out
    code, out, _ = run(capsys, "store", "export", str(tmp_path / "export"), "--cluster", cluster)
    assert code == 0
    jobs = pd.read_parquet(tmp_path / "export" / "jobs.parquet")
    assert sorted(zip(jobs["checkpoint"], jobs["host"])) == sorted(
        (c, h) for c in CHECKPOINTS for h in ("gx10", "ana-ml2")
    )
    layers = pd.read_parquet(tmp_path / "export" / "mask.layers.parquet")
    assert set(layers["job_id"]) == set(jobs["job_id"])
    assert run(capsys, "store", "compact", "--cluster", cluster)[0] == 0
    code, out, _ = run(capsys, "store", "vacuum", "--cluster", cluster)
    assert code == 0 and "deleted 0 file(s)" in out  # nothing older than the retention yet
    assert Store(StoreRoot("s3://lab/e2e")).jobs()["job_id"].nunique() == 4
    no_local_s3_folder(cwd, tmp_path)


def test_migrate_reads_the_older_layout_from_the_bucket(s3, tmp_path, capsys):
    client = s3.client()
    for path in sorted(p for p in LEGACY.rglob("*") if p.is_file()):
        client.put_object(Bucket=BUCKET, Key=f"legacy/{path.relative_to(LEGACY)}", Body=path.read_bytes())
    local = tmp_path / "results"
    shutil.copytree(LEGACY, local)
    code, out, _ = run(capsys, "store", "migrate", "--store", "s3://lab/legacy")
    assert code == 0 and "migrated into s3://lab/legacy/tables" in out
    assert run(capsys, "store", "migrate", "--store", str(local))[0] == 0
    for name in ("jobs", "mask.layers"):
        remote, here = Store("s3://lab/legacy").read(name), Store(local).read(name)
        key = ["job_id", "run_id"] + [c for c in ("layer",) if c in here]
        assert len(remote) == len(here) > 0
        pd.testing.assert_frame_equal(
            remote[sorted(here.columns)].sort_values(key).reset_index(drop=True),
            here[sorted(here.columns)].sort_values(key).reset_index(drop=True),
            check_dtype=False,
        )
    assert f"legacy/{LOCK}" not in s3.keys("legacy")  # migrate held the lock, and let it go


WRITER = """
import sys
from runner.clock import new_run_id
from runner.dispatch.sweep import run_sweep
from runner.lab.cluster import load_cluster
from runner.lab.plan import expand
from runner.store.store import Store

cluster = load_cluster(sys.argv[1])
jobs = [j for j in expand(cluster, "both") if j.host == sys.argv[2]]
counts = run_sweep(cluster=cluster, store=Store(cluster.store_root()), plan="both", jobs=jobs,
                   run_id=new_run_id(), progress=False, inline=True)
print(counts.ok, counts.failed, counts.store_failure)
"""


def test_two_writers_at_once_keep_every_row(s3, tmp_path, capsys):
    """Two processes (standing in for two hosts) sweep into one bucket at the same moment. Not through
    `labprobe sweep`, whose lock lets one sweep at a time: this is delta-rs' commit protocol alone
    (each commit a conditional put of the next log entry), which the lock does not replace."""
    cluster = lab(tmp_path / "lab", "two")
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(cluster), host], stdout=subprocess.PIPE, text=True)
        for host in ("gx10", "ana-ml2")
    ]
    said = [w.communicate(timeout=300)[0].split() for w in writers]
    assert said == [["4", "0", "None"], ["4", "0", "None"]]
    store = Store(StoreRoot("s3://lab/two"))
    jobs = store.jobs()
    assert jobs["job_id"].nunique() == 8 and set(jobs["status"]) == {"ok"}
    assert jobs.groupby("host").size().to_dict() == {"ana-ml2": 4, "gx10": 4}
    layers = store.read("mask.layers")
    assert set(layers["job_id"]) == set(jobs["job_id"])
    per_job = layers.groupby(["job_id", "checkpoint"]).size()
    assert {c: n for (_, c), n in per_job.items()} == {c: num_layers(c) for c in CHECKPOINTS}
    assert run(capsys, "store", "check", "--store", "s3://lab/two")[0] == 0


def test_two_labprobe_sweeps_started_at_once_from_two_hosts_both_land(s3, tmp_path, capsys):
    """Two `labprobe sweep` commands into one bucket at the same moment (each host its own jobs, --inline):
    the lock object lets one run, the other waits for it (--lock-wait-s) and runs after; every row of both."""
    cluster = str(lab(tmp_path / "lab", "both-cli"))
    sweeps = [
        subprocess.Popen(
            [sys.executable, "-m", "runner.cli", "sweep", "--cluster", cluster, "--plan", "both", "--inline", host]
            + ["--lock-wait-s", "240", "--json"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=tmp_path,
        )
        for host in ("gx10", "ana-ml2")
    ]
    ended = [p.communicate(timeout=300) for p in sweeps]
    assert [p.returncode for p in sweeps] == [0, 0], [err[-500:] for _, err in ended]
    assert [json.loads(out)["counts"]["ok"] for out, _ in ended] == [4, 4]
    assert sum("waiting up to 240 s: another sweep is running" in err for _, err in ended) == 1
    jobs = Store(StoreRoot("s3://lab/both-cli")).jobs()
    assert jobs.groupby("host")["job_id"].nunique().to_dict() == {"ana-ml2": 4, "gx10": 4}
    assert run(capsys, "store", "check", "--store", "s3://lab/both-cli")[0] == 0
    no_local_s3_folder(tmp_path)


def test_the_lock_is_an_object_in_the_bucket_that_every_chore_sees(s3, tmp_path, monkeypatch, capsys):
    cluster = str(lab(tmp_path / "lab", "locked"))
    key = f"locked/{LOCK}"
    seen = []
    submit = InlineLauncher.submit

    def look(self, job, **kwargs):  # while the sweep runs a job: its lock is in the bucket
        seen.append(json.loads(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read()))
        return submit(self, job, **kwargs)

    monkeypatch.setattr(InlineLauncher, "submit", look)
    code, out, err = run(capsys, "sweep", "--cluster", cluster, "--plan", "gx10", "--inline", "gx10")
    assert code == 0, err
    assert len(seen) == 4 and {s["plan"] for s in seen} == {"gx10"} and seen[-1]["num_jobs"] == 4
    assert key not in s3.keys("locked")

    with SweepLock(StoreRoot("s3://lab/locked"), run_id="r-held", plan="nightly"):
        body = json.loads(s3.client().get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert body["run_id"] == "r-held" and body["lease_s"] == 60
        code, out, _ = run(capsys, "status", "--cluster", cluster)
        assert code == 0 and "sweep running: run r-held, plan 'nightly'" in out
        for argv in (("store", "compact"), ("store", "vacuum"), ("sweep", "--plan", "gx10", "--inline", "gx10")):
            code, out, err = run(capsys, *argv, "--cluster", cluster)
            assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, err
            assert "another sweep is running on this store: pid" in err and "run r-held, plan 'nightly'" in err
            assert f"(lock s3://lab/locked/{LOCK}; its lease runs out in" in err
    assert key not in s3.keys("locked") and holder(StoreRoot("s3://lab/locked")) is None


def test_a_dead_holders_lock_is_taken_over_once_its_lease_ran_out(s3, tmp_path, capsys):
    cluster = str(lab(tmp_path / "lab", "dead"))
    assert run(capsys, "sweep", "--cluster", cluster, "--plan", "gx10", "--inline", "gx10")[0] == 0
    dead = {"pid": 999999, "host": "gone", "run_id": "r-dead", "plan": "nightly", "lease_s": 3}
    s3.client().put_object(Bucket=BUCKET, Key=f"dead/{LOCK}", Body=json.dumps(dead).encode())
    code, _, err = run(capsys, "store", "compact", "--cluster", cluster)
    assert code == 2 and "run r-dead" in err and "its lease runs out in" in err
    time.sleep(4.2)  # the holder stopped renewing: its lease runs out (by the server's clock, to the second)
    code, out, err = run(capsys, "store", "compact", "--cluster", cluster)
    assert code == 0 and "compacted and checkpointed" in out
    assert "took over the lock of nightly (pid 999999 on gone)" in err
    assert f"dead/{LOCK}" not in s3.keys("dead")


def test_a_held_lock_is_renewed_and_never_taken_while_its_holder_lives(s3):
    place = StoreRoot("s3://lab/renewed")
    client = s3.client()
    with SweepLock(place, run_id="r-live", plan="p", lease_s=2):
        first = client.head_object(Bucket=BUCKET, Key=f"renewed/{LOCK}")["ETag"]
        time.sleep(3)  # past one lease: renewed every half second meanwhile
        assert client.head_object(Bucket=BUCKET, Key=f"renewed/{LOCK}")["ETag"] != first
        assert holder(place)["run_id"] == "r-live"
        with pytest.raises(Exception, match="another sweep is running on this store: .* run r-live"):
            SweepLock(place, run_id="r-other", plan="p").acquire()
    assert holder(place) is None


def test_a_missing_bucket_and_wrong_credentials_are_one_line_and_leave_nothing(s3, tmp_path, monkeypatch, capsys):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    cluster = str(lab(tmp_path / "lab", "refused"))
    buckets = s3.buckets()
    missing = ("--store", "s3://nobucket/labprobe")
    for argv in (("sweep", "--plan", "gx10", "--inline", "gx10"), ("store", "check"), ("status",), ("report",)):
        code, out, err = run(capsys, *argv, *missing, "--cluster", cluster)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert "store s3://nobucket/labprobe: cannot be" in err and "NoSuchBucket" in err, err
    assert s3.buckets() == buckets

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    for argv in (("sweep", "--plan", "gx10", "--inline", "gx10"), ("store", "check"), ("compare", "--probe", "mask")):
        code, out, err = run(capsys, *argv, "--cluster", cluster)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (argv, err)
        assert "store s3://lab/refused: cannot be" in err and "SignatureDoesNotMatch" in err, err
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIANOSUCHKEY")
    code, _, err = run(capsys, "sweep", "--plan", "gx10", "--inline", "gx10", "--cluster", cluster)
    assert code == 2 and "InvalidAccessKeyId" in err
    assert s3.keys("refused") == []  # nothing half-written
    assert list((tmp_path / "tmp").iterdir()) == []  # no spill: no job ran
    no_local_s3_folder(cwd, tmp_path)


class StopsAfterFirstJob(InlineLauncher):
    """Runs jobs inline; once the first is stored, the server's endpoint goes away."""

    def __init__(self, gate: Gate) -> None:
        super().__init__()
        self.gate, self.handed_out = gate, []

    def submit(self, job, *, deadline, guard=None) -> None:
        if len(self.handed_out) == 1:
            self.gate.close()
        self.handed_out.append(job)
        super().submit(job, deadline=deadline, guard=guard)


def test_the_server_gone_mid_sweep_spills_and_the_rerun_fills_the_gap(s3, tmp_path, monkeypatch, capsys):
    """moto keeps its objects in memory: the test takes its endpoint away (a gate in front of it) and brings
    it back, as a restarted MinIO with its disk comes back."""
    gate = Gate(s3.port)
    gate.open()
    monkeypatch.setenv("AWS_ENDPOINT_URL", gate.endpoint)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    try:
        clean, faulty = lab(tmp_path / "clean", "clean"), lab(tmp_path / "faulty", "faulty")
        assert run(capsys, "sweep", "--cluster", str(clean), "--plan", "gx10", "--inline", "gx10")[0] == 0
        cluster, run_id = load_cluster(faulty), new_run_id()
        jobs = expand(cluster, "gx10")
        launcher = StopsAfterFirstJob(gate)
        counts = run_sweep(
            cluster=cluster,
            store=Store(cluster.store_root()),
            plan="gx10",
            jobs=jobs,
            run_id=run_id,
            launcher=launcher,
            progress=False,
            inline=True,
        )
        assert len(launcher.handed_out) == 2  # none handed out after the failed write
        assert (
            counts.store_failure.startswith("store s3://lab/faulty: ") and "cannot be reached" in counts.store_failure
        )
        spilled = list(read_spill(counts.spilled_to))
        assert counts.spilled_to.parent == tmp_path and [r["status"] for r in spilled] == ["ok", "skipped", "skipped"]
        assert spilled[0]["key"]["job_id"] == launcher.handed_out[1].job_id and spilled[0]["result"]["tables"]["layers"]

        gate.open()  # the server is back, every object kept
        assert list(Store(cluster.store_root()).jobs()["job_id"]) == [launcher.handed_out[0].job_id]
        code, out, err = run(capsys, "sweep", "--cluster", str(faulty), "--plan", "gx10", "--inline", "gx10")
        assert code == 0 and "3 ok, 0 failed, 0 skipped, 1 already done" in out, err
        for name, path in (("clean", clean), ("faulty", faulty)):
            assert run(capsys, "store", "export", str(tmp_path / f"export-{name}"), "--cluster", str(path))[0] == 0
        assert newest_rows(tmp_path / "export-faulty") == newest_rows(tmp_path / "export-clean")
        assert run(capsys, "store", "check", "--cluster", str(faulty))[0] == 0
        no_local_s3_folder(tmp_path)
    finally:
        gate.close()


def test_a_commands_local_log_is_moved_onto_the_end_of_its_log_in_the_bucket(s3, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    place = StoreRoot("s3://lab/logged")
    for night in ("first", "second"):
        file = place.log_file("ray-purge.log")
        assert file.parent == tmp_path  # while the command runs: a local file, never a local s3: folder
        with place.keeping_log(file, "ray-purge.log"):
            file.write_text(f"{night} purge's Ray output\n")
        assert not file.exists()
    log = s3.client().get_object(Bucket=BUCKET, Key="logged/logs/ray-purge.log")["Body"].read().decode()
    assert log == "first purge's Ray output\nsecond purge's Ray output\n"
