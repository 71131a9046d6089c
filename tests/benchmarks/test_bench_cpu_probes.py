"""bench_cpu_probes --write: only the "## CPU probes" section of RESULTS.md changes; every other
section, written by other people, stays byte for byte. The benchmark itself is not run here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_spec = importlib.util.spec_from_file_location("bench_cpu_probes", ROOT / "benchmarks" / "bench_cpu_probes.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

NEW = "## CPU probes\n\nnew figures\n"
TITLE = "# Benchmark results\n\n"
GPU = "## GPU probes (H200)\n\nsomeone else's table\n### CPU probes\nsomeone else's sub-heading\n\n"
RUNNER = "## Runner\n\nthe runner's figures; see ## CPU probes below\n"
OLD = "## CPU probes\n\nold figures\n| a | b |\n\n"


def test_only_our_section_is_replaced(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(TITLE + GPU + OLD + RUNNER)
    bench.write_section(NEW, path)
    assert path.read_text() == TITLE + GPU + NEW + "\n" + RUNNER


def test_our_section_last_is_replaced_to_the_end(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(TITLE + RUNNER + "\n" + GPU + OLD)
    bench.write_section(NEW, path)
    assert path.read_text() == TITLE + RUNNER + "\n" + GPU + NEW


def test_missing_section_is_appended_and_the_rest_kept(tmp_path):
    path = tmp_path / "RESULTS.md"
    path.write_text(TITLE + GPU)
    bench.write_section(NEW, path)
    assert path.read_text() == TITLE + GPU.rstrip("\n") + "\n\n" + NEW
    bench.write_section(NEW.replace("new", "newer"), path)  # a second write replaces, not appends
    assert path.read_text() == TITLE + GPU.rstrip("\n") + "\n\n" + NEW.replace("new", "newer")
