"""`labprobe sweep --json` on the embedded local Ray with token authentication on (Ray 2.60's default
for a local cluster): stdout is one JSON object that agrees with the store, stderr holds only the
runner's own timestamped lines (not a terminal: a cron log), and Ray's "Token authentication is
enabled..." banner is in the run's log file, not on the user's screen."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from sweep_util import tiny_qwen3

from runner.store.store import Store

REPO = Path(__file__).resolve().parents[3]
BANNER = "Token authentication is enabled"
STAMPED = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ labprobe sweep|^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \[\d+/\d+ ")


def test_embedded_sweep_json_is_one_object_and_ray_banner_stays_off_the_terminal(tmp_path):
    tiny_qwen3(tmp_path / "checkpoints" / "tiny")
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "hosts": [{"name": "local", "address": "127.0.0.1", "checkpoints_root": str(tmp_path / "checkpoints")}],
                "checkpoints": [{"name": "tiny", "path": "tiny"}],
                "plans": {"two": [{"probe": "mask", "hosts": ["local"], "config": {"seq_len": n}} for n in (32, 48)]},
            }
        )
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}  # auth as shipped: on
    env.update(HOME=str(tmp_path), RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")  # its generated token lands here
    # One CPU for the embedded Ray: the two jobs run one after the other in one worker, which imports torch
    # and transformers once (two CPUs: two workers importing them at once, on CI's two cores).
    env["RAY_OVERRIDE_RESOURCES"] = json.dumps({"CPU": 1})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.cli",
            "sweep",
            "--cluster",
            str(cluster),
            "--plan",
            "two",
            "--store",
            str(tmp_path / "store"),
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)  # the whole of stdout: one object
    jobs = Store(tmp_path / "store").jobs()
    assert answer["run_id"] == jobs["run_id"].iloc[0] and answer["store"] == str(tmp_path / "store")
    assert (
        answer["counts"]
        == {"ok": int((jobs["status"] == "ok").sum()), "failed": 0, "skipped": 0, "unreadable": 0, "already_done": 0}
        and answer["counts"]["ok"] == 2
    )
    assert {(j["job_id"], j["status"]) for j in answer["jobs"]} == set(zip(jobs["job_id"], jobs["status"]))
    assert answer["failures"] == [] and answer["spilled_to"] is None
    assert BANNER not in proc.stderr and BANNER not in proc.stdout
    assert all(STAMPED.match(line) for line in proc.stderr.splitlines()), proc.stderr
    [log] = (tmp_path / "store" / "logs").glob(f"ray-{answer['run_id']}.log")
    assert BANNER in log.read_text()


NOISY = {"noisy": [{"probe": "mask", "config": {"seq_len": n}, "hosts": ["gx10", "doomed"]} for n in (64, 96, 128)]}


def test_a_node_killed_mid_sweep_leaves_its_raylet_dump_in_the_log_not_the_output(ray_cluster, tmp_path, capsys):
    import signal
    import threading
    import time

    from sweep_util import write_cluster

    from runner import cli

    lab = write_cluster(tmp_path / "lab", NOISY, extra_hosts=[{"name": "doomed"}])
    store = Store(tmp_path / "store")
    node = ray_cluster.add_node(num_cpus=1, labels={"labprobe.host": "doomed"})
    ray_cluster.wait_for_nodes()

    def kill_after_first_stored_job():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (store.root / "tables" / "jobs").is_dir():
            time.sleep(0.1)
        node.all_processes["raylet"][0].process.send_signal(signal.SIGKILL)  # no goodbye: Ray's dump follows

    killer = threading.Thread(target=kill_after_first_stored_job)
    killer.start()
    try:
        code = cli.main(["sweep", "--cluster", str(lab), "--plan", "noisy", "--store", str(store.root)])
        # read at once: this test's driver outlives the sweep (a user's does not), and the GCS's "node marked
        # dead" notice for the killed raylet can reach it after the sweep gave the terminal back
        captured = capsys.readouterr()
    finally:
        killer.join()
        ray_cluster.remove_node(node, allow_graceful=False)
    assert code == 1, captured.err[-3000:]  # the doomed host's unfinished jobs failed
    [log] = (store.root / "logs").glob("ray-*.log")
    assert "Raylet is terminated. Termination is unexpected" in log.read_text()
    assert captured.out.startswith("run ") and "(raylet)" not in captured.out and "[state-dump]" not in captured.out
    assert "(raylet)" not in captured.err
