"""The runs directory's newest file: found, symlinks not followed, newest folder first, early stop."""

from __future__ import annotations

import os
import time

import pytest

from runner.gpu import freshness


def test_newest_file_finds_the_newest_and_stops_at_a_fresh_one(tmp_path):
    now = time.time()
    files = {"a/old.log": 7200, "a/b/c/newer.log": 3600, "top.txt": 5000}
    for rel, age in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (now - age, now - age))
    (tmp_path / "a" / "loop").symlink_to(tmp_path)  # must not be followed
    got = freshness.newest_file(str(tmp_path), fresh_s=600, now=now)
    assert got.path == str(tmp_path / "a/b/c/newer.log") and got.age_s == pytest.approx(3600, abs=1)
    (tmp_path / "a" / "ckpt.pt").write_text("y")
    got = freshness.newest_file(str(tmp_path), fresh_s=600)
    assert got.path.endswith("ckpt.pt") and got.age_s < 600
    assert freshness.newest_file(str(tmp_path / "missing"), fresh_s=600) is None


def test_newest_file_opens_the_newest_folder_first_and_stops_there(tmp_path, monkeypatch):
    old = time.time() - 7200
    for i in range(30):
        (tmp_path / f"run{i}").mkdir()
        (tmp_path / f"run{i}" / "log.txt").write_text("x")
        os.utime(tmp_path / f"run{i}" / "log.txt", (old, old))
        if i != 17:  # run17 is live: a file was just created in it, so its folder is the newest
            os.utime(tmp_path / f"run{i}", (old, old))
    os.utime(tmp_path / "run17" / "log.txt")
    opened = []
    real_scandir = os.scandir

    def counting_scandir(path):
        opened.append(path)
        return real_scandir(path)

    monkeypatch.setattr(freshness.os, "scandir", counting_scandir)
    got = freshness.newest_file(str(tmp_path), fresh_s=600)
    assert got.path == str(tmp_path / "run17" / "log.txt") and got.age_s < 600
    assert opened == [str(tmp_path), str(tmp_path / "run17")]  # a full walk would open all 31
