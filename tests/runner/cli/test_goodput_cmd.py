"""`labprobe goodput`: the newest ok profile of a host x checkpoint read from a real store, and the
lab's budget from cluster.yaml as the projection's default."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from probes.carrier import config as carrier
from probes.profile import probe as profile
from probes.result import ProbeResult
from probes.step.steptime.fit import FitRow, ScalingRow
from runner.cli import main
from runner.store.store import JobKey, Store

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def profile_result(fixed_s: float) -> ProbeResult:
    scaling = [
        ScalingRow(seq_len=n, batch_size=1, tokens=n, step_s=fixed_s + 1e-4 * n, launch_bound=False, in_fit=True)
        for n in (128, 256, 512)
    ]
    fit = [
        FitRow(term=t, coef=c, unit="", share_at_production_pct=0.0)
        for t, c in (("quadratic", 0.0), ("linear", 1e-4), ("fixed", fixed_s))
    ]
    config = profile.Config(checkpoint=Path("qwen3-4b-base"), seq_lens=(128, 256, 512))
    return ProbeResult(probe="profile", config=config, tables={"scaling": scaling, "fit": fit})


def store_with_profiles(root: Path) -> Store:
    store = Store(root)
    for i, (host, fixed) in enumerate((("gx10", 0.5), ("gx10", 0.2), ("ana-ml2", 9.0))):
        key = JobKey(
            run_id=f"r{i}",
            job_id=f"j{i}",
            probe="profile",
            host=host,
            checkpoint="qwen3-4b-base",
            checkpoint_fp="fp",
            config_hash="c",
            code_version="v",
            finished_at=T0 + timedelta(hours=i),
        )
        store.write_result(key, profile_result(fixed), started_at=T0, wall_s=1.0, env={})
    return store


def test_goodput_priced_from_the_newest_stored_profile_with_the_labs_budget(tmp_path, capsys):
    store = store_with_profiles(tmp_path / "results")
    lengths = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": [512] * 40}), lengths)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "hosts": [{"name": "gx10", "address": "x"}],
                "budget": {"tokens_per_job": 1_000_000, "arms": 3, "seeds": 2},
            }
        )
    )
    argv = [
        "goodput",
        "--host",
        "gx10",
        "--profile-checkpoint",
        "qwen3-4b-base",
        "--cluster",
        str(cluster),
        "--store",
        str(store.root),
        "--lengths",
        str(lengths),
        "--batch-size",
        "1",
        "--max-length",
        "512",
        "--strategies",
        "longest",
        "--json",
    ]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["tables"]["goodput"]
    step_s = 0.2 + 1e-4 * 512  # the newer gx10 profile (fixed 0.2 s), not the older one or ana-ml2's
    assert abs(row["epoch_s"] - 40 * step_s) < 1e-9
    hours = 1_000_000 / (512 / step_s) / 3600
    assert abs(row["hours_per_job"] - hours) < 1e-9 and abs(row["hours_sweep"] - 6 * hours) < 1e-9
    assert "j1" in out["summary"]["step_model"]
    # an entry's own budget wins over the lab's
    assert main(argv + ["--num-seeds", "1"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["tables"]["goodput"]
    assert abs(row["hours_sweep"] - 3 * hours) < 1e-9


def test_no_profile_in_the_store_is_one_line_exit_2(tmp_path, capsys):
    store = store_with_profiles(tmp_path / "results")
    lengths = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": [5, 6]}), lengths)
    argv = [
        "goodput",
        "--host",
        "gx10",
        "--profile-checkpoint",
        "gemma-3-4b",
        "--store",
        str(store.root),
        "--cluster",
        str(tmp_path / "missing.yaml"),
        "--lengths",
        str(lengths),
    ]
    assert main(argv) == 2
    assert "no such cluster file" in capsys.readouterr().err
    argv[argv.index("--cluster") : argv.index("--cluster") + 2] = []
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "no ok profile of checkpoint 'gemma-3-4b' on host 'gx10'" in err and len(err.strip().splitlines()) == 1


def test_goodput_priced_with_the_newest_stored_carriers_stack(tmp_path, capsys):
    store = store_with_profiles(tmp_path / "results")
    rows = [
        {
            "model": "qwen3-4b-base",
            "variant": v,
            "step_s": s,
            "tokens_per_step": 4096,
            "trustworthy": True,
            "status": "ok",
        }
        for v, s in (("baseline", 0.4), ("bf16-adapters", 0.3), ("bf16-adapters+compile", 0.2))
    ]
    key = JobKey(
        run_id="rc",
        job_id="jc",
        probe="carrier",
        host="gx10",
        checkpoint="qwen3-4b-base",
        checkpoint_fp="fp",
        config_hash="c",
        code_version="v",
        finished_at=T0,
    )
    config = carrier.Config(checkpoint=(Path("qwen3-4b-base"),), seq_len=512)  # the shape goodput prices
    store.write_result(
        key, ProbeResult(probe="carrier", config=config, tables={"carriers": rows}), started_at=T0, wall_s=1.0, env={}
    )
    lengths = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": [512] * 40}), lengths)
    argv = ["goodput", "--host", "gx10", "--profile-checkpoint", "qwen3-4b-base", "--store", str(store.root)]
    argv += ["--lengths", str(lengths), "--batch-size", "1", "--max-length", "512", "--strategies", "longest", "--json"]
    assert main(argv + ["--stack-from-store", "--stack", "bf16-adapters"]) == 0
    out = json.loads(capsys.readouterr().out)
    (row,) = out["tables"]["goodput"]
    assert abs(row["epoch_s"] - 40 * (0.2 + 1e-4 * 512) * 0.75) < 1e-9  # the newest profile, x0.3/0.4
    summary = out["summary"]
    assert (
        summary["priced_with"] == "longest batching, stack bf16-adapters" and "carrier job jc" in summary["stack_from"]
    )
    assert "profile job j1" in summary["step_model"] and "carrier job jc" in summary["step_model"]
    assert main(argv + ["--stack-from-store"]) == 0  # unset: the fastest measured ok
    assert json.loads(capsys.readouterr().out)["summary"]["stack"] == "bf16-adapters+compile"
    assert main(argv + ["--stack-from-store", "--stack", "compile"]) == 2
    err = capsys.readouterr().err.strip()
    assert "carrier job jc" in err and "no row for 'compile'" in err and len(err.splitlines()) == 1
    assert main(argv + ["--stack-from-store", "--stack-json", "x.json"]) == 2
    assert "not both" in capsys.readouterr().err
    other = [a if a != "qwen3-4b-base" else "gemma-3-4b" for a in argv]
    store.write_result(
        dataclasses.replace(key, job_id="jp", probe="profile", checkpoint="gemma-3-4b"),
        profile_result(0.2),
        started_at=T0,
        wall_s=1.0,
        env={},
    )
    assert main(other + ["--stack-from-store"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no ok carrier of checkpoint 'gemma-3-4b' on host 'gx10'" in err and len(err.splitlines()) == 1


def test_a_stored_carrier_of_another_card_fails_stack_of_the_fits_step(tmp_path, capsys):
    """The store keeps each job's summary: its card reaches goodput as a --stack-json file's does."""
    store = Store(tmp_path / "results")
    rows = [{"model": "qwen3-4b-base", "variant": v, "step_s": s, "tokens_per_step": 512, "trustworthy": True,
             "status": "ok"} for v, s in (("baseline", 0.4), ("bf16-adapters", 0.3))]  # fmt: skip
    for job, probe, result in (
        ("jp", "profile", dataclasses.replace(profile_result(0.2), summary={"device": "NVIDIA H100 80GB HBM3"})),
        ("jc", "carrier", ProbeResult(probe="carrier", config=carrier.Config(checkpoint=(Path("qwen3-4b-base"),),
              seq_len=512), tables={"carriers": rows}, summary={"device": "NVIDIA H200"})),
    ):  # fmt: skip
        key = JobKey(run_id="r", job_id=job, probe=probe, host="gx10", checkpoint="qwen3-4b-base",
                     checkpoint_fp="fp", config_hash="c", code_version="v", finished_at=T0)  # fmt: skip
        store.write_result(key, result, started_at=T0, wall_s=1.0, env={})
    lengths = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": [512] * 40}), lengths)
    argv = ["goodput", "--host", "gx10", "--profile-checkpoint", "qwen3-4b-base", "--store", str(store.root)]
    argv += ["--lengths", str(lengths), "--batch-size", "1", "--max-length", "512", "--json", "--stack-from-store"]
    assert main(argv) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)["checks"]}
    assert checks["stack_of_the_fits_step"]["detail"].endswith("card 'NVIDIA H200' vs 'NVIDIA H100 80GB HBM3'")


def test_a_store_that_is_a_file_is_named_so(tmp_path, capsys):
    lengths = tmp_path / "l.parquet"
    pq.write_table(pa.table({"length": [5, 6]}), lengths)
    store = tmp_path / "results"
    store.write_text("not a store")
    argv = ["goodput", "--host", "gx10", "--profile-checkpoint", "q", "--store", str(store), "--lengths", str(lengths)]
    for extra in ([], ["--stack-from-store"]):
        assert main(argv + extra) == 2
        err = capsys.readouterr().err.strip()
        assert f"--store {store}: a file, not a store folder" in err and len(err.splitlines()) == 1, err
    assert store.read_text() == "not a store"
