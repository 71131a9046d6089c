"""`labprobe sweep` bad input: one line on stderr, exit 2, before any Ray starts or anything is stored."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner import cli

REPO = Path(__file__).resolve().parents[3]


def sweep_fails_in_one_line(capsys, *args: str) -> str:
    assert cli.main(["sweep", "--cluster", str(REPO / "cluster.yaml"), "--plan", "demo", *args]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err


@pytest.mark.parametrize(
    "option, value",
    [
        ("--timeout-s", "nan"),
        ("--timeout-s", "inf"),
        ("--timeout-s", "0"),
        ("--timeout-s", "-5"),
        ("--gpu-wait-s", "nan"),
        ("--gpu-wait-s", "-1"),
    ],
)
def test_a_timeout_that_is_not_a_finite_positive_number_is_bad_input(capsys, tmp_path, option, value):
    err = sweep_fails_in_one_line(capsys, "--store", str(tmp_path / "store"), option, value)
    assert f"{option}: expected a finite number of seconds" in err, err
    assert not (tmp_path / "store").exists()


def test_a_store_naming_an_existing_file_is_bad_input(capsys, tmp_path):
    path = tmp_path / "results.txt"
    path.write_text("a file, not a store\n")
    err = sweep_fails_in_one_line(capsys, "--store", str(path))
    assert f"store {path}: not a folder" in err, err
    assert path.read_text() == "a file, not a store\n"


def test_a_checkpoint_name_the_filesystem_refuses_stops_the_sweep_before_any_job(capsys, tmp_path):
    # Before: validate passed, the job ran, then its result failed to write ("File name too long").
    import yaml

    long_name = "q" * 300
    data = yaml.safe_load((REPO / "cluster.yaml").read_text())
    data["store"]["root"] = str(tmp_path / "store")
    local = next(h for h in data["hosts"] if h["name"] == "local")
    local["checkpoints_root"], local["corpora_root"] = str(REPO / "demo" / "checkpoints"), str(REPO / "demo")
    data["checkpoints"][0]["name"] = long_name
    data["plans"] = {
        "p": [{"probe": "mask", "hosts": ["local"], "checkpoints": [long_name], "config": {"seq_len": 64}}]
    }
    data.pop("schedule", None)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data))
    assert cli.main(["sweep", "--cluster", str(path), "--plan", "p", "--inline", "local"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "cluster.yaml: checkpoints[0].name: 'qqqq" in err and "is 300 bytes" in err, err
    assert not (tmp_path / "store").exists()
