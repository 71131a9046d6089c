"""Plan expansion and job identity: probe x checkpoint x host x config; job_id stable, and a function
of probe, config, checkpoint fingerprint and host only (never of where the checkpoint lies)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import yaml

from runner.lab.cluster import load_cluster
from runner.lab.plan import expand, job_id
from runner.store.fingerprint import fingerprint

REPO = Path(__file__).resolve().parents[3]
DEMO_CKPT = REPO / "demo" / "checkpoints"


def cluster_file(tmp_path: Path, plans: dict) -> Path:
    data = {
        "hosts": [
            {"name": "a", "address": "a", "checkpoints_root": str(DEMO_CKPT)},
            {"name": "b", "address": "b", "checkpoints_root": str(tmp_path / "elsewhere")},
        ],
        "checkpoints": [{"name": n, "path": n} for n in ("qwen3-0.6b-base", "gemma-3-4b")],
        "corpora": [{"name": "demo", "path": str(REPO / "demo" / "corpus.jsonl")}],
        "plans": plans,
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_expansion_is_the_cross_product(tmp_path):
    cluster = load_cluster(
        cluster_file(
            tmp_path,
            {
                "p": [
                    {"probe": "mask", "config": {"seq_len": 64}},
                    {"probe": "padding", "checkpoints": ["gemma-3-4b"], "hosts": ["b"], "corpus": "demo"},
                    {"probe": "profile", "checkpoints": ["gemma-3-4b"], "hosts": ["a"]},
                ]
            },
        )
    )
    jobs = expand(cluster, "p")
    got = sorted((j.probe, j.checkpoint, j.host) for j in jobs)
    expected = sorted(
        [("mask", c, h) for c in ("qwen3-0.6b-base", "gemma-3-4b") for h in ("a", "b")]
        + [("padding", "gemma-3-4b", "b"), ("profile", "gemma-3-4b", "a")]
    )
    assert got == expected
    assert [j.gpu for j in jobs if j.probe == "profile"] == [True]
    assert not any(j.gpu for j in jobs if j.probe != "profile")
    padding = next(j for j in jobs if j.probe == "padding")
    assert padding.paths["checkpoint"] == str(tmp_path / "elsewhere" / "gemma-3-4b")
    assert padding.paths["corpus"] == str(REPO / "demo" / "corpus.jsonl")
    config = padding.probe_config()  # the probe's own Config, with host paths typed as Paths
    assert (
        config.corpus == REPO / "demo" / "corpus.jsonl" and config.checkpoint == tmp_path / "elsewhere" / "gemma-3-4b"
    )


def test_job_id_is_a_stable_hash_of_probe_config_fingerprint_and_host(tmp_path):
    plans = {"p": [{"probe": "mask", "config": {"seq_len": 64}}, {"probe": "mask", "config": {"seq_len": 128}}]}
    jobs = expand(load_cluster(cluster_file(tmp_path, plans)), "p")
    again = expand(load_cluster(cluster_file(tmp_path, plans)), "p")
    assert [j.with_fingerprint("f1").job_id for j in jobs] == [j.with_fingerprint("f1").job_id for j in again]
    first = jobs[0].with_fingerprint("f1")
    blob = json.dumps(["mask", first.config_hash, "f1", first.host, first.checkpoint]).encode()
    assert first.job_id == hashlib.sha256(blob).hexdigest()[:16]
    assert first.job_id == job_id("mask", first.config_hash, "f1", first.host, first.checkpoint)
    ids = {j.with_fingerprint(fp).job_id for j in jobs for fp in ("f1", "f2")}
    assert len(ids) == len(jobs) * 2  # host, checkpoint, config and fingerprint each change the id
    # The host's paths are not part of the identity: hosts a and b differ in paths, not in config hash.
    by_host = {j.host: j.config_hash for j in jobs if j.checkpoint == "gemma-3-4b" and j.config["seq_len"] == 64}
    assert by_host["a"] == by_host["b"]


def test_fingerprint_same_checkpoint_anywhere_different_checkpoint_differs(tmp_path):
    one, two = tmp_path / "host1" / "ckpt", tmp_path / "host2" / "deep" / "renamed"
    shutil.copytree(DEMO_CKPT / "qwen3-0.6b-base", one)
    shutil.copytree(DEMO_CKPT / "qwen3-0.6b-base", two)
    (one / "model.safetensors").write_bytes(b"\0" * 100)
    (two / "model.safetensors").write_bytes(b"\1" * 100)  # same size: same fingerprint (sizes, not content)
    assert fingerprint(one) == fingerprint(two)
    # Whitespace and key order of config.json do not matter; its content does.
    config = json.loads((two / "config.json").read_text())
    (two / "config.json").write_text(json.dumps(dict(reversed(list(config.items()))), indent=7))
    assert fingerprint(one) == fingerprint(two)
    (two / "model.safetensors").write_bytes(b"\0" * 101)
    assert fingerprint(one) != fingerprint(two)
    assert fingerprint(DEMO_CKPT / "qwen3-0.6b-base") != fingerprint(DEMO_CKPT / "qwen3-1.7b-base")
    # Tokenizer files are not weights: adding one leaves the fingerprint alone.
    (one / "extra_tokens.json").write_text("{}")
    assert fingerprint(one) == fingerprint(tmp_path / "host1" / "ckpt")


def test_a_repeated_entry_is_one_job(tmp_path):
    # seq_len 4096 is mask's default: the same Config written two ways is the same job.
    plans = {
        "p": [{"probe": "mask", "hosts": ["a"]}, {"probe": "mask", "hosts": ["a", "b"], "config": {"seq_len": 4096}}]
    }
    jobs = expand(load_cluster(cluster_file(tmp_path, plans)), "p")
    assert sorted((j.checkpoint, j.host) for j in jobs) == sorted(
        (c, h) for c in ("qwen3-0.6b-base", "gemma-3-4b") for h in ("a", "b")
    )


def test_each_entry_builds_its_probe_config_once(tmp_path, monkeypatch):
    """Its typed fields and every checkpoint's config hash come from one build, not 1 + checkpoints."""
    import runner.lab.plan

    calls = []
    real = runner.lab.plan.build_probe_config
    monkeypatch.setattr(runner.lab.plan, "build_probe_config", lambda *a, **k: calls.append(a[0]) or real(*a, **k))
    plans = {"p": [{"probe": "mask", "config": {"seq_len": 64}}, {"probe": "padding", "corpus": "demo"}]}
    jobs = expand(load_cluster(cluster_file(tmp_path, plans)), "p")
    assert len(jobs) == 2 * 2 * 2 and calls == ["mask", "padding"]


def test_a_field_added_at_the_value_that_measures_as_before_keeps_a_stored_jobs_hash():
    """carrier's `rows` (full: the batch carrier always measured) and goodput's `new_shape_s` (unset: the 0 it
    was) are hashed as before, so the next sweep does not measure every stored carrier job again on a GPU."""
    from runner.lab.cluster import PlanEntry
    from runner.lab.plan import plan_config_hash

    entry = PlanEntry(probe="carrier")
    before = {"seq_len": 4096, "batch_size": 1}
    same = plan_config_hash(entry, {**before, "rows": "full"}, "random")
    assert same == plan_config_hash(entry, before, "random")
    assert plan_config_hash(entry, {**before, "rows": "packed"}, "random") != same
    goodput = PlanEntry(probe="goodput")
    assert plan_config_hash(goodput, {"new_shape_s": None}, "random") == plan_config_hash(
        goodput, {"new_shape_s": 0.0}, "random"
    )
    assert plan_config_hash(goodput, {"new_shape_s": 0.2}, "random") != plan_config_hash(
        goodput, {"new_shape_s": 0.0}, "random"
    )
