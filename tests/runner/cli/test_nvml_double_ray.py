"""The pynvml test double on a real Ray node: `labprobe idle`, the sweep's placement (a pinned
reading task) and a whole `labprobe sweep` against every scenario, the way gx10 (a GB10) runs them.

The node's raylet starts with the double first on PYTHONPATH and the scenario file named in its
environment, so its workers import it as `pynvml`; the test rewrites the file between scenarios.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from nvml_util import DOUBLE_DIR, EXPECTED, SCENARIO_ENV
from sweep_util import write_cluster

from runner.cli import main
from runner.dispatch.placement import GpuPlacer
from runner.gpu.idle import Thresholds
from runner.store.store import Store

HOST = "gb10"
PLANS = {"gpu": [{"probe": "carrier", "hosts": [HOST], "checkpoints": ["qwen3-0.6b-base"], "config": {"steps": 0}}]}


@pytest.fixture(scope="module")
def gb10(tmp_path_factory, ray_cluster):
    """(cluster.yaml, the scenario file) of a lab whose host `gb10` is a Ray node playing the double."""
    folder = tmp_path_factory.mktemp("gb10")
    scenario = folder / "scenario.json"
    scenario.write_text(json.dumps({"scenario": "gb10-idle"}))
    path = write_cluster(folder, PLANS, extra_hosts=[{"name": HOST, "gpus": 1, "idle": {"window_s": 0.3}}])
    env = {
        "PYTHONPATH": os.pathsep.join([str(DOUBLE_DIR), os.environ.get("PYTHONPATH", "")]),
        SCENARIO_ENV: str(scenario),
        "LABPROBE_FAKE_NVML_DIR": "",  # the double, not the fake files the other tests' nodes read
        "LABPROBE_FAKE_CUDA": "1",  # runner.gpu.cuda's seam: torch there "sees" the double's card
    }
    node = ray_cluster.add_node(num_cpus=1, num_gpus=1, labels={"labprobe.host": HOST}, env_vars=env)
    ray_cluster.wait_for_nodes()
    yield path, scenario
    ray_cluster.remove_node(node)


def play(scenario_file: Path, name: str) -> None:
    tmp = scenario_file.with_suffix(".tmp")
    tmp.write_text(json.dumps({"scenario": name}))
    tmp.replace(scenario_file)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_labprobe_idle_reads_each_scenario_on_its_node(gb10, scenario, capsys):
    lab, scenario_file = gb10
    play(scenario_file, scenario)
    code = main(["idle", "--cluster", str(lab), "--json", "--timeout-s", "30"])
    rows = [r for r in json.loads(capsys.readouterr().out) if r["host"] == HOST]
    word, fragments = EXPECTED[scenario]
    [row] = rows
    assert row["verdict"] == word and row["node_host"] == HOST, row
    assert all(f in row["reason"] for f in fragments), row["reason"]
    assert code == (0 if word == "idle" else 1)  # the other hosts read no-gpu here: not a failure


@pytest.mark.parametrize("scenario", ["gb10-idle", "gb10-busy", "gpu-lost", "process-list-needs-permission"])
def test_placement_reads_the_node_over_ray(gb10, scenario):
    _, scenario_file = gb10
    play(scenario_file, scenario)
    placer = GpuPlacer(deadline=None)
    placed, why = placer.try_place(HOST, thresholds=Thresholds(window_s=0.3))
    word, fragments = EXPECTED[scenario]
    assert placed == (word == "idle") and placer.unreadable(HOST) == (word == "unreachable")
    assert placed or fragments[0] in why, why


@pytest.mark.parametrize(
    ("scenario", "status", "code"),
    [("gb10-idle", "ok", 0), ("gb10-busy", "skipped", 0), ("gpu-lost", "skipped", 1)],
)
def test_the_sweep_runs_on_an_idle_gb10_skips_a_busy_one_and_fails_an_unreadable_one(
    gb10, scenario, status, code, tmp_path, capsys
):
    lab, scenario_file = gb10
    play(scenario_file, scenario)
    args = ["sweep", "--cluster", str(lab), "--plan", "gpu", "--gpu-wait-s", "2", "--store", str(tmp_path), "--report"]
    assert main(args) == code
    capsys.readouterr()
    [job] = Store(tmp_path).jobs().to_dict("records")
    assert (job["host"], job["status"]) == (HOST, status), job["reason"]
    if scenario == "gb10-busy":
        assert job["reason"].startswith(f"no idle GPU on {HOST} before the deadline")
        assert "pid 4242424 (user ?, 20.00 GiB) computes on it" in job["reason"]
    if scenario == "gpu-lost":
        assert job["reason"].startswith(f"GPU host {HOST} could not be read before the deadline")
        assert "NVMLError_GpuIsLost" in job["reason"]
    [report] = tmp_path.rglob("*.html")
    page = report.read_text()
    top = page[: page.index("What this run found")]  # the host line leads the findings
    expect = {"gb10-busy": f"{HOST} busy all night: 1 GPU job not run", "gpu-lost": f"{HOST} GPUs could not be read"}
    assert (expect[scenario] in top) if scenario in expect else "GPU job not run" not in page
