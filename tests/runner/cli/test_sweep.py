"""`labprobe sweep` on the shared real Ray cluster (head + gx10 + ana-ml2): CPU jobs run on the hosts
they name and land under them; a rerun does nothing new; --force adds, never rewrites; a host no node
carries fails at once; a GPU job with no GPU host is skipped with the reason."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest
from sweep_util import CHECKPOINTS, assert_kept, snapshot, write_cluster

from runner import cli
from runner.store.store import Store

MASK = {"probe": "mask", "config": {"seq_len": 64}}
PLANS = {
    "cpu": [
        {**MASK, "hosts": ["gx10", "ana-ml2"]},
        {
            "probe": "bucket",
            "hosts": ["ana-ml2"],
            "checkpoints": ["qwen3-0.6b-base"],
            "corpus": "demo",
            "config": {"max_length": 512, "seeds": [0]},
        },
    ],
    "ghost": [{**MASK, "hosts": ["gx10", "ghost"], "checkpoints": ["qwen3-0.6b-base"]}],
    "gpu": [{"probe": "profile", "hosts": ["gx10"], "checkpoints": ["qwen3-0.6b-base"]}],
}


@pytest.fixture(scope="module")
def lab(tmp_path_factory, ray_cluster):
    folder = tmp_path_factory.mktemp("lab")
    return write_cluster(folder, PLANS, extra_hosts=[{"name": "ghost"}])


def sweep(cluster: Path, *args: str) -> int:
    return cli.main(["sweep", "--cluster", str(cluster), *args])


def test_cpu_jobs_run_on_the_hosts_they_name_and_land_under_them(lab, capsys, monkeypatch):
    # The driver's code version stamps the key column; each host reads its own into the job's env.
    monkeypatch.setattr("runner.dispatch.loop.code_version", lambda: "driver-copy")
    assert sweep(lab, "--plan", "cpu") == 0
    store = Store(lab.parent / "store")
    jobs = store.jobs()
    expected = {("mask", c, h) for c in CHECKPOINTS for h in ("gx10", "ana-ml2")} | {
        ("bucket", "qwen3-0.6b-base", "ana-ml2")
    }
    assert sorted(zip(jobs["probe"], jobs["checkpoint"], jobs["host"])) == sorted(expected)
    assert set(jobs["status"]) == {"ok"}, jobs[["probe", "host", "reason"]]
    # Where each job really ran: the node label its task saw, recorded in the job's environment.
    ran_on = [json.loads(e)["node_host"] for e in jobs["env_json"]]
    assert ran_on == list(jobs["host"])
    assert set(jobs["code_version"]) == {"driver-copy"}
    host_versions = {json.loads(e)["code_version"] for e in jobs["env_json"]}
    assert "driver-copy" not in host_versions and all("+g" in v for v in host_versions), host_versions
    # Table rows carry the host and checkpoint of their job (columns of the Delta table).
    layers = store.read("mask.layers")
    assert layers["job_id"].nunique() == 4
    for job_id, rows in layers.groupby("job_id"):
        job = jobs[jobs["job_id"] == job_id].iloc[0]
        assert set(zip(rows["host"], rows["checkpoint"])) == {(job["host"], job["checkpoint"])}
    # ana-ml2 reads its own copy at another path: the fingerprint, computed there, is the same.
    mask = jobs[jobs["probe"] == "mask"]
    assert mask.groupby("checkpoint")["checkpoint_fp"].nunique().eq(1).all()
    assert mask["checkpoint_fp"].nunique() == 2
    out = capsys.readouterr().out
    assert "5 ok, 0 failed, 0 skipped, 0 already done" in out
    # The end of the sweep shows each probe's answer, read back here from the stored rows.
    layers = store.read("mask.layers")
    for (host, ckpt), rows in layers.groupby(["host", "checkpoint"]):
        full = rows[rows["window"].isna()]
        line = next(x for x in out.splitlines() if x.startswith(f"{ckpt} ") and f" {host} " in x)
        assert f" {len(rows)} " in line and f" {int(full['fast_path'].sum())} of {len(full)} " in line, line
    size = json.loads(jobs.loc[jobs["probe"] == "bucket", "summary_json"].iloc[0])["bucket_size_90pct_gain"]
    [line] = [
        x
        for x in out.splitlines()
        if x.startswith("qwen3-0.6b-base ") and " ana-ml2 " in x and x.split()[2] == str(size)
    ]
    assert "== mask: does every layer keep the fast path" in out and "ratio_to" not in out  # analyses: no ratios


def dies_on_ana_ml2(job, **kwargs):
    """The job function, failing every job on ana-ml2 (as a node death fails them)."""
    from runner.dispatch.launch import execute

    if job.host == "ana-ml2":
        raise RuntimeError("the node running it died")
    return execute(job, **kwargs)


def test_a_failed_rerun_still_shows_the_earlier_values_marked(lab, tmp_path, capsys):
    """Issue 12 item 16: the newest ana-ml2 rows are failed; its earlier ok answers stay on screen."""
    from runner.cli.sweep import print_end
    from runner.clock import new_run_id
    from runner.dispatch.launch import RayLauncher
    from runner.dispatch.sweep import run_sweep
    from runner.lab.cluster import load_cluster
    from runner.lab.plan import expand

    cluster = load_cluster(lab)
    jobs = [j for j in expand(cluster, "cpu") if j.probe == "mask"]
    store = Store(tmp_path)
    assert run_sweep(cluster=cluster, store=store, plan="cpu", jobs=jobs, run_id=new_run_id(), progress=False).ok == 4
    before = store.jobs()
    run_id = new_run_id()
    counts = run_sweep(
        cluster=cluster,
        store=store,
        plan="cpu",
        jobs=jobs,
        run_id=run_id,
        force=True,
        progress=False,
        launcher=RayLauncher(fn=dies_on_ana_ml2),
    )
    assert (counts.ok, counts.failed) == (2, 2)
    print_end(store, jobs, counts, run_id, list(cluster.hosts))
    out = capsys.readouterr().out
    for ckpt in CHECKPOINTS:
        ok = before[(before["host"] == "ana-ml2") & (before["checkpoint"] == ckpt) & (before["probe"] == "mask")]
        earlier = ok.sort_values("finished_at")["run_id"].iloc[-1]
        assert any(x.startswith(f"{ckpt} ") and f" ana-ml2  earlier: run {earlier} " in x for x in out.splitlines()), (
            out
        )
        assert f"{ckpt} @ ana-ml2: this run failed: RuntimeError: the node running it died" in out


def test_rerun_does_nothing_new_and_force_adds_without_rewriting(lab, capsys):
    root = lab.parent / "store"
    before = snapshot(root)
    assert sweep(lab, "--plan", "cpu") == 0
    assert "0 ok, 0 failed, 0 skipped, 5 already done" in capsys.readouterr().out
    now = snapshot(root)
    new = sorted(set(now) - set(before))  # only the rerun's record of its plan (`labprobe report --run`)
    assert len(new) == 1 and new[0].startswith("runs/") and {k: now[k] for k in before} == before
    assert sweep(lab, "--plan", "cpu", "--force", "--store", str(root)) == 0
    after = snapshot(root)
    assert_kept(before, after)
    assert len(Store(root).jobs()) == 10  # five new rows beside the five old ones


def test_inline_runs_one_hosts_jobs_here_with_the_same_job_ids(lab, tmp_path, capsys):
    # The gx10 jobs ran through Ray in the first test: inline, on "gx10", they are the same jobs.
    assert sweep(lab, "--plan", "cpu", "--inline", "gx10") == 0
    assert "0 ok, 0 failed, 0 skipped, 2 already done" in capsys.readouterr().out
    assert sweep(lab, "--plan", "cpu", "--inline", "gx10", "--store", str(tmp_path)) == 0
    jobs = Store(tmp_path).jobs()
    ray_jobs = Store(lab.parent / "store").jobs()
    assert set(jobs["job_id"]) == set(ray_jobs.loc[ray_jobs["host"] == "gx10", "job_id"])
    assert set(jobs["host"]) == {"gx10"} and set(jobs["status"]) == {"ok"}
    assert sweep(lab, "--plan", "cpu", "--inline", "nowhere", "--store", str(tmp_path)) == 2


def test_a_host_no_node_carries_fails_within_a_bounded_time(lab, tmp_path, capsys):
    t0 = time.monotonic()
    assert sweep(lab, "--plan", "ghost", "--store", str(tmp_path)) == 1
    assert time.monotonic() - t0 < 30
    jobs = Store(tmp_path).jobs().set_index("host")
    assert jobs.loc["gx10", "status"] == "ok"
    assert jobs.loc["ghost", "status"] == "failed"
    assert "no alive Ray node carries labprobe.host=ghost" in jobs.loc["ghost", "reason"]
    assert "failed: mask qwen3-0.6b-base @ ghost" in capsys.readouterr().out


def test_gpu_job_without_a_gpu_host_is_skipped_with_the_reason(lab, tmp_path):
    assert sweep(lab, "--plan", "gpu", "--store", str(tmp_path)) == 0
    job = Store(tmp_path).jobs().iloc[0]
    assert (job["probe"], job["status"]) == ("profile", "skipped")
    assert job["reason"] == "no GPU: host gx10 has gpus: 0 in cluster.yaml"


def sleepy(job, **kwargs):
    """The job function, hanging far past any timeout on checkpoint gemma-3-4b."""
    import time

    from runner.dispatch.launch import execute

    if job.checkpoint == "gemma-3-4b":
        time.sleep(120)
    return execute(job, **kwargs)


def test_a_raising_probe_and_a_job_past_its_timeout_become_failed_jobs(lab, tmp_path):
    from runner.clock import new_run_id
    from runner.dispatch.launch import RayLauncher
    from runner.dispatch.sweep import run_sweep
    from runner.lab.cluster import load_cluster
    from runner.lab.plan import expand

    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text(json.dumps({"model_type": "no-such-architecture"}))
    cluster = load_cluster(lab)
    jobs = expand(cluster, "cpu")
    jobs = [j for j in jobs if j.probe == "mask" and j.host == "gx10"]  # qwen3 and gemma on gx10
    qwen = next(j for j in jobs if j.checkpoint == "qwen3-0.6b-base")
    raising = dataclasses.replace(qwen, paths={**qwen.paths, "checkpoint": str(broken)})
    store = Store(tmp_path / "store")
    counts = run_sweep(cluster=cluster, store=store, plan="cpu", jobs=[raising], run_id=new_run_id(), progress=False)
    assert (counts.ok, counts.failed) == (0, 1)
    t0 = time.monotonic()  # (a timeout counts from submission: worker start-up included)
    counts = run_sweep(
        cluster=cluster,
        store=store,
        plan="cpu",
        jobs=[jobs[1]],
        run_id=new_run_id(),
        timeout_s=2.0,
        progress=False,
        launcher=RayLauncher(fn=sleepy),
    )
    assert 2.0 <= time.monotonic() - t0 < 15
    assert (counts.ok, counts.failed) == (0, 1)
    reasons = dict(zip(Store(tmp_path / "store").jobs()["checkpoint"], Store(tmp_path / "store").jobs()["reason"]))
    assert (
        reasons["qwen3-0.6b-base"].startswith("InputError: ") and "no-such-architecture" in reasons["qwen3-0.6b-base"]
    )
    assert reasons["gemma-3-4b"] == "timeout: not finished within 2 s"


def test_bad_input_exits_2(lab, tmp_path, capsys):
    assert sweep(lab, "--plan", "nope", "--store", str(tmp_path)) == 2
    assert "no plan 'nope'" in capsys.readouterr().err
    assert sweep(lab, "--plan", "cpu", "--deadline", "25:99", "--store", str(tmp_path)) == 2
    assert not (tmp_path / "tables" / "jobs").exists()


def test_a_host_whose_node_offers_no_cpu_fails_its_jobs_at_once(lab, tmp_path):
    from runner.dispatch.launch import InlineLauncher
    from runner.dispatch.loop import Dispatch
    from runner.lab.cluster import load_cluster
    from runner.lab.plan import expand

    cluster = load_cluster(lab)
    jobs = [j.with_fingerprint("fp") for j in expand(cluster, "cpu") if j.host == "gx10"]
    dispatch = Dispatch(
        cluster=cluster,
        store=Store(tmp_path),
        run_id="r1",
        plan="cpu",
        launcher=InlineLauncher(),
        live=lambda: {"gx10": (0, 0.0)},
    )
    counts = dispatch.run(jobs)
    assert (counts.ok, counts.failed) == (0, len(jobs)) and len(jobs) == 2
    assert set(Store(tmp_path).jobs()["reason"]) == {
        "host gx10: its Ray node offers no CPU (started with --num-cpus=0?)"
    }


def test_the_bundled_demo_plan_runs_end_to_end(demo_sweep):
    """The repo's own cluster.yaml and demo data (inline on host `local`, as the embedded Ray would; the session's
    one demo sweep, tests/conftest.py)."""
    import yaml

    repo_yaml = Path(__file__).resolve().parents[3] / "cluster.yaml"
    tmp_path = demo_sweep / "store"
    assert (demo_sweep / "code").read_text() == "0"
    data = yaml.safe_load(repo_yaml.read_text())
    num_ckpts = len(data["checkpoints"])
    expected: dict[str, int] = {}
    for entry in data["plans"]["demo"]:
        expected[entry["probe"]] = expected.get(entry["probe"], 0) + len(entry.get("checkpoints", [None] * num_ckpts))
    jobs = Store(tmp_path).jobs()
    assert len(jobs) == sum(expected.values())
    for probe, num in expected.items():
        mine = jobs[jobs["probe"] == probe]
        assert len(mine) == num and set(mine["host"]) == {"local"}, probe
        if probe in ("profile", "carrier"):
            assert set(mine["status"]) == {"skipped"} and mine["reason"].str.startswith("no GPU").all()
        else:
            assert set(mine["status"]) == {"ok"}, mine["reason"].tolist()
    assert {"mask.layers", "padding.strategies", "bucket.sweep"} <= set(Store(tmp_path).table_names())
    out = (demo_sweep / "out.txt").read_text()
    assert "== bucket: which bucket size wins 90%" in out and "ratio_to" not in out
    strategies = Store(tmp_path).read("padding.strategies")
    for ckpt, rows in strategies.groupby("checkpoint"):
        # one row per tokenizer: the demo's checkpoints share one, so their row names them all
        [line] = [
            x for x in out.splitlines() if ckpt in x.split("  ")[0].split(", ") and " local " in x and "4,096" in x
        ]
        for fraction in rows["pad_fraction"]:
            assert f" {100 * fraction:.3g} " in line + " " or f" {100 * fraction:.1f} " in line + " ", (fraction, line)
    assert "skipped: qwen3-0.6b-base @ local: no GPU" in out
