"""Every command that writes a file says in one line why it cannot (read-only, a directory, a missing
parent folder), exit 2, no traceback, nothing made; missing folders only inside the store or with --mkdir.

A read-only file system is a real one: a tmpfs mounted read-only (as root), or a 0555 folder as any
other user (root writes through permission bits, so that case is only taken when not root)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from runner.cli import main


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("outputs") / "store"
    root.mkdir()
    assert main(["demo", "load-sample", "--store", str(root)]) == 0
    return root


def _mount_read_only(folder: Path, contents: Path | None) -> bool:
    if os.geteuid() != 0:
        return False
    options = "size=64m" if contents is not None else "ro,size=1m"
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(folder)], check=False).returncode:
        return False
    if contents is not None:
        shutil.copytree(contents, folder, dirs_exist_ok=True)
        subprocess.run(["mount", "-o", "remount,ro", str(folder)], check=True)
    return True


@pytest.fixture
def read_only(tmp_path):
    """Make a read-only folder (a copy of `contents` in it, if given); unmounted after the test."""
    made: list[Path] = []

    def make(name: str, contents: Path | None = None) -> Path:
        folder = tmp_path / name
        folder.mkdir()
        if _mount_read_only(folder, contents):
            made.append(folder)
        elif os.geteuid() != 0:
            if contents is not None:
                shutil.copytree(contents, folder, dirs_exist_ok=True)
            for path in [folder, *folder.rglob("*")]:
                if path.is_dir():
                    path.chmod(0o555)
        else:
            pytest.skip("no read-only file system can be made here (root, and mount refused)")
        return folder

    yield make
    for folder in made:
        subprocess.run(["umount", str(folder)], check=False)


def fails_in_one_line(capsys, argv: list[str], *needles: str) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and len(captured.err.strip().splitlines()) == 1, captured.err
    for needle in needles:
        assert needle in captured.err, captured.err


def test_report_out_with_a_missing_folder_is_refused_unless_mkdir(store, tmp_path, capsys):
    out = tmp_path / "nonexistent" / "sub" / "r.html"
    fails_in_one_line(capsys, ["report", "--store", str(store), "--out", str(out)], "does not exist", "--mkdir")
    assert not (tmp_path / "nonexistent").exists()  # it used to make both folders silently
    assert main(["report", "--store", str(store), "--out", str(out), "--mkdir"]) == 0
    assert out.is_file()


def test_report_out_a_directory_is_refused(store, tmp_path, capsys):
    fails_in_one_line(capsys, ["report", "--store", str(store), "--out", str(tmp_path)], "is a directory")
    assert [p.name for p in tmp_path.iterdir()] == []


def test_report_into_a_read_only_place_is_one_line(store, read_only, capsys):
    folder = read_only("ro")
    fails_in_one_line(capsys, ["report", "--store", str(store), "--out", str(folder / "r.html")], str(folder))
    ro_store = read_only("ro-store", contents=store)
    fails_in_one_line(capsys, ["report", "--store", str(ro_store)], "reports")


@pytest.mark.parametrize("command", ["compare", "history"])
def test_a_plot_that_cannot_be_written_is_one_line_before_the_work(store, tmp_path, read_only, capsys, command):
    argv = [command, "--store", str(store), "--probe", "carrier", "--plot"]
    folder = read_only("ro")
    fails_in_one_line(capsys, [*argv, str(folder / "x.png")], "--plot", str(folder))
    fails_in_one_line(capsys, [*argv, str(tmp_path / "nope" / "x.png")], "does not exist")
    assert not (tmp_path / "nope").exists()


def test_store_export_that_cannot_be_written_is_one_line(store, tmp_path, read_only, capsys):
    folder = read_only("ro")
    argv = ["store", "export", "--store", str(store)]
    fails_in_one_line(capsys, [*argv, str(folder / "exp")], "export", str(folder))
    fails_in_one_line(capsys, [*argv, str(folder)], "export", str(folder))
    fails_in_one_line(capsys, [*argv, str(tmp_path / "a" / "b")], "does not exist")
    assert not (tmp_path / "a").exists()
    assert main([*argv, str(tmp_path / "a" / "b"), "--mkdir"]) == 0
    assert (tmp_path / "a" / "b" / "jobs.parquet").is_file()


def test_a_name_longer_than_the_filesystem_takes_is_one_line(store, tmp_path, capsys):
    """A 300-byte folder name: report --out, --plot and store export raised OSError [Errno 36] from
    pathlib (is_dir lets ENAMETOOLONG through), a traceback, exit 1."""
    long = tmp_path / ("n" * 300)
    for argv in (
        ["report", "--store", str(store), "--out", str(long / "r.html"), "--mkdir"],
        ["report", "--store", str(store), "--out", str(long) + ".html"],
        ["compare", "--store", str(store), "--probe", "carrier", "--plot", str(long / "x.png")],
        ["store", "export", "--store", str(store), str(long)],
    ):
        fails_in_one_line(capsys, argv, "name too long")
