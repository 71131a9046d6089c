"""Options derived from a probe's Config: every probe's `--help` renders, its field docs included."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

import probes
from runner.cli import main
from runner.cli.options import add_config_options, option_name


@pytest.mark.parametrize("name", sorted(probes.REGISTRY))
def test_help_of_every_probe_exits_0_and_lists_its_options(name, capsys):
    assert main(["probe", name, "--help"]) == 0
    out = capsys.readouterr().out
    for field in dataclasses.fields(probes.get(name).Config):
        assert option_name(field.name) + " " in out


def test_a_percent_sign_in_a_field_doc_is_shown_as_written(capsys):
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Config:
        share_pct: float = 5.0
        """Share of the step, % (100% is all of it)."""

    parser = argparse.ArgumentParser(prog="p")
    add_config_options(parser, Config)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--help"])
    assert exit_info.value.code == 0
    assert "Share of the step, % (100% is all of it). (default: 5.0)" in " ".join(capsys.readouterr().out.split())
