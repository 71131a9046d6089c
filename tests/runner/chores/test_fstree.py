"""No-follow trees: the lstat walk (hard links once, links recorded not followed), containment,
fd-based removal refusing a swapped or linked directory, and digests that do read through links."""

from __future__ import annotations

import hashlib
import os

import pytest

from runner.chores.fstree import is_inside, remove_tree, tree_digests, walk_tree


def test_walk_counts_a_hard_link_once_and_records_links_without_following_them(tmp_path):
    top = tmp_path / "ckpt"
    (top / "step-1").mkdir(parents=True)
    (top / "step-1" / "w.bin").write_bytes(b"x" * 5000)
    os.link(top / "step-1" / "w.bin", top / "w-again.bin")
    (top / "small.txt").write_bytes(b"abc")
    big = tmp_path / "elsewhere"
    big.mkdir()
    (big / "huge.bin").write_bytes(b"y" * 9000)
    (top / "step-1" / "out").symlink_to(big)
    tree = walk_tree(str(top), "checkpoints")
    assert tree.num_files == 3 and tree.bytes == 5000 + 3  # two names, one inode for w.bin
    distinct = {os.stat(top / "small.txt"), os.stat(top / "w-again.bin")}
    assert tree.alloc_bytes == sum(st.st_blocks * 512 for st in distinct)
    assert sorted(tree.files.values()) in (
        ["checkpoints/small.txt", "checkpoints/step-1/w.bin"],
        ["checkpoints/small.txt", "checkpoints/w-again.bin"],
    )
    assert tree.symlinks == [("checkpoints/step-1/out", str(big))]
    st_top, st_sub = os.stat(top), os.stat(top / "step-1")
    assert tree.dirs == {(st_top.st_dev, st_top.st_ino), (st_sub.st_dev, st_sub.st_ino)}
    assert tree.mounts == [] and tree.errors == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root lists a mode-000 folder all the same")
def test_walk_records_an_unreadable_folder_as_an_error(tmp_path):
    (tmp_path / "top" / "locked").mkdir(parents=True)
    os.chmod(tmp_path / "top" / "locked", 0)
    try:
        tree = walk_tree(str(tmp_path / "top"), "t")
    finally:
        os.chmod(tmp_path / "top" / "locked", 0o700)
    assert tree.errors == ["cannot list t/locked: Permission denied"]


def test_is_inside_is_by_path_components_not_by_prefix():
    assert is_inside("/runs/a", "/runs/a") and is_inside("/runs/a/x", "/runs/a")
    assert is_inside("/runs/a/x", "/runs/a/")
    assert not is_inside("/runs/ab/x", "/runs/a") and not is_inside("/runs", "/runs/a")


def test_remove_refuses_a_directory_swapped_since_its_check(tmp_path):
    (tmp_path / "checkpoints" / "step-1").mkdir(parents=True)
    (tmp_path / "checkpoints" / "step-1" / "w.bin").write_text("w")
    st = os.stat(tmp_path / "checkpoints")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match="checkpoints changed while it was being removed"):
            remove_tree("checkpoints", fd, (st.st_dev, st.st_ino + 1))
        assert (tmp_path / "checkpoints" / "step-1" / "w.bin").exists()  # nothing removed
        remove_tree("checkpoints", fd, (st.st_dev, st.st_ino))
    finally:
        os.close(fd)
    assert not (tmp_path / "checkpoints").exists()


def test_remove_refuses_a_link_in_place_of_the_directory(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "keep.bin").write_text("k")
    (tmp_path / "checkpoints").symlink_to(tmp_path / "real")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError, match="checkpoints is no longer a directory"):
            remove_tree("checkpoints", fd)
    finally:
        os.close(fd)
    assert (tmp_path / "real" / "keep.bin").read_text() == "k"


def test_digests_read_files_and_through_links_and_name_what_cannot_be_read(tmp_path):
    adapter = tmp_path / "adapter"
    (adapter / "sub").mkdir(parents=True)
    (adapter / "w.safetensors").write_bytes(b"weights")
    (adapter / "sub" / "cfg.json").write_bytes(b"{}")
    (tmp_path / "outside.bin").write_bytes(b"elsewhere")
    (adapter / "via-link.bin").symlink_to(tmp_path / "outside.bin")
    (adapter / "dangling").symlink_to(tmp_path / "gone")
    (adapter / "dir-link").symlink_to(tmp_path)

    def sha(data):
        return hashlib.sha256(data).hexdigest()

    assert tree_digests(str(adapter)) == {
        "w.safetensors": sha(b"weights"),
        os.path.join("sub", "cfg.json"): sha(b"{}"),
        "via-link.bin": sha(b"elsewhere"),
        "dangling": "not read: No such file or directory",
        "dir-link": "not read: directory",
    }
