"""Help reads the same everywhere: one placeholder per kind of value across every command, subcommand and
probe; one name per idea (the older spelling still runs, hidden); each subcommand shows its own options."""

from __future__ import annotations

import re

import pytest

import probes
from runner.cli import COMMANDS, main

SUBCOMMANDS = {"store": ("check", "compact", "vacuum", "migrate"), "schedule": ("install", "remove", "show")}


def _helps(capsys) -> dict[str, str]:
    argvs = [[name] for name in COMMANDS if name not in SUBCOMMANDS]
    argvs += [[name, sub] for name, subs in SUBCOMMANDS.items() for sub in subs]
    argvs += [["probe", name] for name in probes.REGISTRY]
    out = {}
    for argv in argvs:
        assert main([*argv, "--help"]) == 0, argv
        out[" ".join(argv)] = capsys.readouterr().out
    return out


def test_every_option_has_one_placeholder_everywhere_and_none_is_a_single_letter(capsys):
    seen: dict[str, set[str]] = {}
    for text in _helps(capsys).values():
        usage = text.split("\n\n")[0]
        for option, metavar in re.findall(r"\[?(--[a-z][a-z0-9-]*) ([A-Z][A-Z_:{},|a-z0-9-]*)", usage):
            seen.setdefault(option, set()).add(metavar)
    kinds = {o: m for o, m in seen.items() if o in ("--cluster", "--store", "--plot", "--host", "--address")}
    assert kinds == {
        "--cluster": {"FILE"},
        "--store": {"DIR"},
        "--plot": {"FILE"},
        "--host": {"HOST"},
        "--address": {"ADDRESS"},
    }
    assert not [o for o, ms in seen.items() if any(len(m) == 1 and m != "N" for m in ms)], seen  # N: a count
    # --checkpoint is a PATH to a probe and a NAME in the store: two kinds, never three
    assert seen["--checkpoint"] <= {"PATH", "NAME"}


def test_one_name_per_idea_and_the_old_spelling_still_parses(capsys):
    helps = _helps(capsys)
    assert "--fit-lens" in helps["probe profile"] and "--fit-lens" in helps["probe replay"]
    assert "--seq-lens" not in helps["probe profile"] and "--num-steps" not in helps["probe replay"]
    assert "--seed " in helps["probe padding"] and "--seeds" not in helps["probe padding"]
    from runner.cli.probe import probe_parser

    parser, _ = probe_parser("profile")
    assert parser.parse_args(["--checkpoint", "c", "--seq-lens", "1", "2", "3"]).seq_lens == [1, 2, 3]
    parser, _ = probe_parser("replay")
    assert parser.parse_args(["--checkpoint", "c", "--num-steps", "7"]).num_steps == 7


def test_goodput_lists_only_what_it_accepts_and_each_store_action_its_own_options(capsys):
    helps = _helps(capsys)
    assert "--profile " not in helps["goodput"]
    assert main(["goodput", "--host", "h", "--profile-checkpoint", "c", "--profile", "p.json"]) == 2
    assert "unrecognized arguments: --profile p.json" in capsys.readouterr().err  # not an abbreviation either
    assert "--retention-days" in helps["store vacuum"] and "--dry-run" in helps["store vacuum"]
    assert "--retention-days" not in helps["store check"] and "--dry-run" not in helps["store compact"]
    assert (
        "(nothing is changed)" in " ".join(helps["schedule show"].split())
        and "created if absent" not in helps["schedule show"]
    )


@pytest.mark.parametrize("argv", [["store"], ["store", "nope"]])
def test_store_without_a_known_action_is_a_usage_error(argv, capsys):
    assert main(argv) == 2
