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


@pytest.mark.parametrize("option, value", [("--timeout-s", "nan"), ("--timeout-s", "inf"), ("--timeout-s", "0"),
                                           ("--timeout-s", "-5"), ("--gpu-wait-s", "nan"), ("--gpu-wait-s", "-1")])
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
