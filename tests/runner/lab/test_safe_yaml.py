"""Hostile cluster files cost milliseconds and give one short line: an alias bomb inside a plan's
config, a value that refers to itself, a huge file, a huge value quoted in an error, an int Python
refuses to parse."""

from __future__ import annotations

from pathlib import Path

import pytest

from probes.result import SHOWN_CHARS, InputError
from runner.lab import safe_yaml
from runner.lab.cluster import load_cluster

HEAD = "hosts: [{name: local, address: 127.0.0.1}]\ncheckpoints: [{name: q, path: q}]\n"


def bomb(levels: int) -> str:
    """A flow list whose items are nested lists of ten aliases: 10**levels strings once expanded."""
    items = ['&l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    items += [f"&l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return "[" + ", ".join(items) + "]"


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_cluster(path)
    line = str(info.value)
    assert "\n" not in line and line.startswith("cluster.yaml: "), line[:500]
    return line


def test_an_alias_bomb_in_a_plan_config_is_refused_before_anything_walks_it(tmp_path):
    # 10**9 strings once expanded: the old loader handed it to validation, whose error line quoted it
    # all (80-100 s, 8.5 GB). The node graph is counted instead, aliases at each use.
    text = HEAD + f"plans:\n  p:\n  - probe: mask\n    config: {{seq_len: {bomb(9)}}}\n"
    line = refusal(tmp_path, text)
    assert "expands to more than" in line and "aliases" in line and len(line) < 300


def test_a_file_below_the_bound_with_a_few_aliases_still_loads(tmp_path):
    # A shared `config` used by two entries through an alias is ordinary YAML and must keep working.
    text = HEAD + "plans:\n  p:\n  - probe: mask\n    config: &c {seq_len: 64}\n  - probe: mask\n    config: *c\n"
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    assert load_cluster(path).spec.plans["p"][1].config == {"seq_len": 64}


def test_a_value_holding_itself_is_refused(tmp_path):
    line = refusal(tmp_path, HEAD + "plans:\n  p:\n  - probe: mask\n    config: {seq_len: &a [*a]}\n")
    assert "refers to a value that contains it" in line


def test_a_huge_file_is_refused_unread(tmp_path):
    path = tmp_path / "cluster.yaml"
    path.write_text(HEAD + "# " + "x" * (safe_yaml.MAX_FILE_BYTES + 1) + "\n")
    line = refusal(tmp_path, path.read_text())
    assert "byte limit of a cluster file" in line and len(line) < 200


def test_a_huge_value_is_cut_in_the_error_line(tmp_path):
    huge = "y" * 300_000  # under the file bound; the old error line quoted all of it
    for text in (
        f"hosts: [{{name: local, address: x, gpus: {huge}}}]\n",  # wrong type
        f"hosts: [{{name: {huge}, address: x}}]\n",  # fails the name pattern
        HEAD + f"plans:\n  p:\n  - probe: mask\n    checkpoints: [{huge}]\n",  # unknown name
        HEAD + f"plans:\n  p:\n  - probe: mask\n    config: {{seq_len: {huge}}}\n",  # a config field
        HEAD + f"{huge}: 1\n",
    ):  # an unknown key
        line = refusal(tmp_path, text)
        assert len(line) < 200 + 2 * SHOWN_CHARS, len(line)
        assert "yyyyyyyyyy" in line  # the start of the value is still shown


def test_an_int_python_refuses_to_parse_is_one_line(tmp_path):
    line = refusal(tmp_path, HEAD + f"plans:\n  p:\n  - probe: mask\n    config: {{seq_len: {'9' * 5000}}}\n")
    assert "malformed YAML" in line and len(line) < 400
