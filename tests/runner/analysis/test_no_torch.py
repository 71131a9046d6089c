"""compare, history, report and recommend read the store: they must not import torch, transformers or Ray (torch
alone costs ~1.2 s of a command that otherwise takes well under a second). Nor must the commands that check a
plan through the probes' Configs (validate, host-command, store check): a sweep's driver checks its plan the same
way, and paid ~2 CPU-s of torch for it. Each runs in a fresh
process with the lab's cluster file (its plans name every probe), and the process says what it
imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from test_report import build_lab_store

REPO = Path(__file__).resolve().parents[3]
HEAVY = ("torch", "transformers", "ray", "peft")
WRAPPER = f"""
import json, sys
from runner.cli import main
code = main(sys.argv[1:])
print(json.dumps({{"code": code, "heavy": [m for m in {HEAVY!r} if m in sys.modules]}}))
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Path:
    """The repo's cluster file (every probe in its plans), its store the lab store of test_report.py."""
    folder = tmp_path_factory.mktemp("lab")
    build_lab_store(folder / "results")
    lab = yaml.safe_load((REPO / "cluster.yaml").read_text())
    lab["store"] = {"root": str(folder / "results")}
    for host in lab["hosts"]:
        host.update({k: str(REPO / v) for k, v in host.items() if k.endswith("_root") and not v.startswith("/")})
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(lab, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "command",
    [
        ["compare", "--probe", "carrier"],
        ["compare", "--probe", "padding", "--plot", "{folder}/compare.png"],
        ["history", "--probe", "carrier", "--plot", "{folder}/history.png"],
        ["report"],
        ["recommend"],
        ["validate"],
        ["host-command", "gx10"],
        ["store", "check"],
    ],
)
def test_store_readers_import_no_torch(cluster, command):
    args = [a.replace("{folder}", str(cluster.parent)) for a in command] + ["--cluster", str(cluster)]
    out = subprocess.run(
        [sys.executable, "-c", WRAPPER, *args],
        capture_output=True,
        text=True,
        cwd=cluster.parent,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # history exits 1 on the lab's planted drift; a plan check must pass, or it proves nothing of the Configs
    assert result["code"] in ((0, 1) if command[0] == "history" else (0,)), out.stderr[-2000:]
    assert result["heavy"] == [], f"{command[0]} imported {result['heavy']}"


def test_a_sweeps_driver_starts_without_torch_or_matplotlib():
    """The sweep command's module: the report's plots (matplotlib, ~0.5-3 CPU-s) load only with --report, and the
    probes' Configs and rows it handles are torch-free (tests/runner/dispatch/test_launch_env.py unpickles them)."""
    code = "import sys, runner.cli.sweep; print([m for m in ('torch', 'matplotlib') if m in sys.modules])"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}
    )
    assert out.stdout.strip() == "[]", out.stderr[-2000:]
