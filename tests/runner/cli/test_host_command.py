"""`labprobe host-command`: the exact `ray start` line per host, head or worker, label and GPU count."""

from __future__ import annotations

from pathlib import Path

import yaml

from runner import cli


def cluster(tmp_path: Path, ray: dict) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "ray": ray,
                "hosts": [
                    {"name": "gx10", "address": "gx10.lab", "gpus": 1},
                    {"name": "ana-ml2", "address": "10.0.0.7", "gpus": 2},
                ],
            }
        )
    )
    return path


def last_line(capsys) -> str:
    return capsys.readouterr().out.strip().splitlines()[-1]


def test_head_and_worker_lines(tmp_path, capsys):
    path = cluster(tmp_path, {"port": 6380})
    assert cli.main(["host-command", "gx10", "--cluster", str(path)]) == 0
    assert last_line(capsys) == (
        "RAY_AUTH_MODE=token ray start --head --port=6380 --num-gpus=1 --labels labprobe.host=gx10"
    )
    assert cli.main(["host-command", "ana-ml2", "--cluster", str(path)]) == 0
    out = capsys.readouterr().out
    # Every card a slot: Ray's GPU count is the host's GPU jobs at once, no resource of our own.
    assert out.strip().splitlines()[-1] == (
        "RAY_AUTH_MODE=token ray start --address=gx10.lab:6380 --num-gpus=2 --labels labprobe.host=ana-ml2"
    )
    assert "RAY_AUTH_TOKEN_PATH" in out and "ray get-auth-token --generate" in out


def test_ray_head_names_the_head_and_unknown_host_is_bad_input(tmp_path, capsys):
    path = cluster(tmp_path, {"head": "ana-ml2"})
    assert cli.main(["host-command", "gx10", "--cluster", str(path)]) == 0
    assert "--address=10.0.0.7:6379" in last_line(capsys)
    assert cli.main(["host-command", "gx11", "--cluster", str(path)]) == 2
    assert "no host 'gx11'" in capsys.readouterr().err


def test_a_host_without_gpus_offers_no_gpu_slot(tmp_path, capsys):
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"hosts": [{"name": "cpu1", "address": "cpu1.lab"}]}))
    assert cli.main(["host-command", "cpu1", "--cluster", str(path)]) == 0
    assert last_line(capsys) == (
        "RAY_AUTH_MODE=token ray start --head --port=6379 --num-gpus=0 --labels labprobe.host=cpu1"
    )
