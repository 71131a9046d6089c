"""`labprobe sweep` with no --address: the embedded local Ray (one node labelled `local`), started by
the command itself in a fresh process, runs the plan end to end and stores the rows.

The other sweep tests join the shared test cluster or run --inline, so only this one exercises
`runner.hosts.nodes.connect(None)`: the path a fresh machine takes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from sweep_util import tiny_qwen3

from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
SEQ_LEN = 64


def test_sweep_without_an_address_runs_the_plan_on_an_embedded_ray(tmp_path):
    config = tiny_qwen3(tmp_path / "checkpoints" / "tiny-qwen3")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "hosts": [{"name": "local", "address": "127.0.0.1", "checkpoints_root": str(tmp_path / "checkpoints")}],
                "checkpoints": [{"name": "tiny-qwen3", "path": "tiny-qwen3"}],
                "plans": {"tiny": [{"probe": "mask", "hosts": ["local"], "config": {"seq_len": SEQ_LEN}}]},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # nothing to join: it must start its own
    env["RAY_AUTH_MODE"] = "disabled"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "sweep",
            "--cluster",
            str(cluster),
            "--plan",
            "tiny",
            "--store",
            str(tmp_path / "store"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "1 ok, 0 failed, 0 skipped" in proc.stdout, proc.stdout
    store = Store(tmp_path / "store")
    [job] = store.jobs().to_dict("records")
    assert (job["probe"], job["host"], job["checkpoint"], job["status"]) == ("mask", "local", "tiny-qwen3", "ok")
    assert '"node_host": "local"' in job["env_json"]  # it ran as a task on the embedded node, not inline
    layers = store.read("mask.layers")
    assert len(layers) == config["num_hidden_layers"] and set(layers["job_id"]) == {job["job_id"]}
