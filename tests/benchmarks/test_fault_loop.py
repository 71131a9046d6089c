"""benchmarks/fault_loop.py, a small N: sweeps killed at random into one store with links planted
in every folder, vacuum at 0 days and compaction between them; nothing outside the store changes,
`store check` exits 0, the export equals a clean run's. The recorded run (N=100) is in RESULTS.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("fault_loop", ROOT / "benchmarks" / "fault_loop.py")
loop = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(loop)


def test_two_iterations_leave_the_outside_alone_and_the_store_whole(tmp_path):
    """Seed 29 draws a kill of the driver right after a result (mid-commit, inline) then a Ray worker's kill: two
    kinds of fault in two iterations (seed 7 took three, two of them worker kills, ~40 s more on 2 cores)."""
    figures = tmp_path / "figures.json"
    code = loop.run(tmp_path / "work", 2, 29, figures)
    found = json.loads(figures.read_text())["figures"]
    assert found["faults"] == {"driver-after-result": 1, "worker": 1}, found["faults"]
    assert found["kills"] == {"driver": 1, "worker": 1}, found  # drawn, and each kill landed while its sweep ran
    assert found["outside_unchanged"] and found["outside_unchanged_every_iteration"], found
    assert found["check_exit"] == 0 and found["export_equal"], found
    assert found["check_links_reported"] > 0  # the planted links were there to be refused
    assert code == 0


def test_the_manifest_sees_a_deleted_or_changed_file(tmp_path):
    outside = tmp_path / "outside"
    loop.make_outside(outside)
    before = loop.manifest(outside)
    (outside / "sub" / "deep-0.json").write_text("changed")
    assert loop.manifest(outside) != before
    (outside / "precious-1.parquet").unlink()
    assert set(before) - set(loop.manifest(outside)) == {"precious-1.parquet"}
