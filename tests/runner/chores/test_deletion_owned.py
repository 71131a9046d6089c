"""A purge deletes only a run's checkpoints/ directly under the runs root, by its real path (issue 36):
the scan's verdict is asked again, by path, right before the rename."""

from __future__ import annotations

import os

from runner.chores import deletion
from runner.chores.scan import ActionRow


def row(path: str) -> ActionRow:
    return ActionRow(
        host="h", run="r", path=path, bytes=0, alloc_bytes=0, num_files=0, action="remove", real_path=path
    )  # fmt: skip


def test_only_a_run_folder_directly_under_the_root_is_owned(tmp_path):
    root, elsewhere = tmp_path / "runs", tmp_path / "elsewhere"
    (root / "a" / "checkpoints").mkdir(parents=True)
    (elsewhere / "b" / "checkpoints").mkdir(parents=True)
    os.symlink(elsewhere / "b", root / "b")
    (root / "c" / "deep" / "checkpoints").mkdir(parents=True)
    assert deletion._owned(str(root), row(str(root / "a" / "checkpoints")))
    assert not deletion._owned(str(root), row(str(root / "b" / "checkpoints")))  # through a link: elsewhere
    assert not deletion._owned(str(root), row(str(elsewhere / "b" / "checkpoints")))
    assert not deletion._owned(str(root), row(str(root / "c" / "deep" / "checkpoints")))
    refused = deletion._outside(row(str(root / "b" / "checkpoints")))
    assert refused.action == "refuse" and str(elsewhere / "b" / "checkpoints") in refused.reason
