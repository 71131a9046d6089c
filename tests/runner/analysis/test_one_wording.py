"""One wording of each fact: the demo's Gemma-4 mask answer (its full layers keep the maskless fast path, and flash
cannot run them) reads the same at the end of the sweep, in `labprobe compare`, in the report and in the README.
Before, the sweep said `5 of 5`, compare `layers_fast_path 0` and the docs "loses the fast path"."""

from __future__ import annotations

import html
from pathlib import Path

import yaml

from runner import cli

REPO = Path(__file__).resolve().parents[3]
WORDS = "5 of 5 (not flash: head_dim 512, efficient kernel)"
"""Gemma-4 26B-A4B at 2,048 tokens, no padding: what `full_fast_path` says (probes.mask.answer)."""


def test_gemma4s_fast_path_is_worded_the_same_in_the_sweep_compare_the_report_and_the_readme(tmp_path, capsys):
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        yaml.safe_dump(
            {
                "store": {"root": "store"},
                "hosts": [
                    {"name": "local", "address": "127.0.0.1", "checkpoints_root": str(REPO / "demo/checkpoints")}
                ],
                "checkpoints": [{"name": "gemma-4-26b-a4b", "path": "gemma-4-26b-a4b", "weights": "random"}],
                "plans": {
                    "demo": [{"probe": "mask", "hosts": ["local"], "config": {"seq_len": 2048}}]
                },  # as the demo's
            }
        )
    )
    lab = ["--cluster", str(cluster)]
    assert cli.main(["sweep", *lab, "--inline", "local"]) == 0
    swept = capsys.readouterr().out
    row = next(line for line in swept.splitlines() if line.startswith("gemma-4-26b-a4b"))
    assert WORDS in row and row.split()[-1] == "ok"
    assert cli.main(["compare", "--probe", "mask", *lab]) == 0
    compared = capsys.readouterr().out
    # `in`, not the first line: the session's Ray driver may print a line of its own (another test's worker killed)
    assert "== mask: answer.full_fast_path by host" in compared.splitlines()
    assert next(line for line in compared.splitlines() if line.startswith("gemma-4-26b-a4b")).endswith(WORDS)
    assert cli.main(["report", *lab]) == 0
    [reported] = [line for line in capsys.readouterr().out.splitlines() if line.startswith("report: ")]
    page = Path(reported.removeprefix("report: ")).read_text()
    assert f"<td>{html.escape(WORDS)}</td>" in page or f'<td class="nw">{html.escape(WORDS)}</td>' in page
    readme = (REPO / "README.md").read_text()
    assert f"`{WORDS}`" in readme and "loses the fast path" not in readme and "lose the fast path" not in readme
