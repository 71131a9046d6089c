"""A probe runs with its process's imports frozen out of Python's collector: the gc.collect() a probe runs between
its measurements walks what the probe made (runner.hosts.jobenv.spare_collector). Each case in a fresh process,
as a Ray worker or a `labprobe probe` run starts: the test session freezes its own (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
STANDIN = REPO / "tests" / "helpers" / "standin"
CHECKPOINT = REPO / "demo" / "checkpoints" / "qwen3-0.6b-base"
EXECUTE = textwrap.dedent(
    """
    import gc, json, sys
    from runner.dispatch.launch import execute
    from runner.lab.plan import Job
    job = Job(
        plan="p", entry=0, probe="standin", checkpoint="c", host="local", corpus=None, config={}, config_hash="h",
        gpu=False, paths={"checkpoint": sys.argv[1]},
    )
    before = gc.get_freeze_count()
    outcome = execute(job)
    print(json.dumps({"before": before, "status": outcome.status, **outcome.result.summary}))
    """
)


def _env() -> dict[str, str]:
    path = os.pathsep.join([str(STANDIN), str(REPO), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "LABPROBE_PROBES": "standin_probe"}


@pytest.mark.parametrize("how", ["execute", "labprobe probe"])
def test_a_probe_runs_with_its_processs_imports_frozen_out_of_the_collector(how):
    if how == "execute":
        argv = [sys.executable, "-c", EXECUTE, str(CHECKPOINT)]
    else:
        argv = [sys.executable, "-m", "runner.cli", "probe", "standin", "--checkpoint", str(CHECKPOINT), "--json"]
    out = subprocess.run(argv, env=_env(), cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.splitlines()[-1]) if how == "execute" else json.loads(out.stdout)["summary"]
    if how == "execute":
        assert seen["before"] == 0 and seen["status"] == "ok"
    assert (
        seen["frozen_objects"] > 10_000
    )  # the imports (probes, the runner, Ray's or the CLI's own): tens of thousands
