"""README as a test: every `$ labprobe ...` command README shows is run here (those that run on a CPU) from a
lab folder laid out like the repo root, with the console script (so nothing relies on `python -m` or
PYTHONPATH), in README's order, on one store per session (the demo sweep's). Its exit code must be 0 (1
where README shows a failing check) and every output line README shows must be in the output: table rows
and headers as ordered subsequences of a real line's words (README excerpts columns), checks and
`key: value` pieces as text; run ids, timings and store paths are wildcards. A line with a trailing
`# ...` comment is illustrative. GPU commands (and those reading a lab's hosts) are parsed through the CLI's
own parsers and Config checks, and their `--harness` imported from the repo root."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()
RUN = re.compile(
    r"^labprobe (probe (mask|padding|bucket|goodput)|sweep|status|demo|compare|history|host-command"
    r"|schedule install --crontab-file)\b"
)
WILD = re.compile(
    r"^(\d{8}T\d{6}Z-[0-9a-f]{4}:?|\[?\d+/\d+|\d+\.\d+s\]?|\(?\.?/[\w./-]*\)?[:;,]?|\d{4}-\d\d-\d\dT\S*)$"
)


def commands() -> list[tuple[str, list[str]]]:
    """(command, README's output lines) of every `$ labprobe` line in a fenced block, in README's order."""
    found: list[tuple[str, list[str]]] = []
    for block in re.findall(r"^```[a-z]*\n(.*?)^```", README, flags=re.S | re.M):
        lines = block.splitlines()
        if not any(line.startswith("$ ") for line in lines):  # a block of bare commands, no output shown
            found += [(line.split("  #")[0].strip(), []) for line in lines if line.startswith("labprobe ")]
            continue
        i = 0
        while i < len(lines):
            if not lines[i].startswith("$ labprobe"):
                if found and found[-1][0] is not None and block_owner(found, lines, i):
                    found[-1][1].append(lines[i])
                i += 1
                continue
            command = lines[i][2:]
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            found.append((command.split("  #")[0].strip(), []))
            i += 1
    return found


def block_owner(found, lines, i) -> bool:
    return any(line.startswith("$ labprobe") for line in lines[:i])


def expected(lines: list[str]) -> list[str]:
    """README's output lines, a wrapped check's continuation joined to its line; excerpts and comments out."""
    out: list[str] = []
    for line in lines:
        if line.strip() in ("", "...") or re.search(r"\s#\s", line) or line.startswith("---"):
            continue
        if out and out[-1].lstrip().startswith("[") and line.startswith("         "):
            out[-1] += " " + line.strip()
            continue
        out.append(line)
    return out


def _words(text: str) -> list[str]:
    return text.split()


def _subsequence(want: list[str], have: list[str]) -> bool:
    it = iter(have)
    return all(any(w == "*" or w == h for h in it) for w in want)


def shown_in(line: str, output: str) -> bool:
    text = " ".join(output.split())
    stripped = line.strip()
    if stripped.startswith("[") or re.search(r"\S: \S.*\s{3,}\S+: ", stripped):
        pieces = re.split(r"\.\.\.|\s{3,}", stripped) if not stripped.startswith("[") else stripped.split(", ..., ")
        return all(" ".join(p.split()) in text for p in pieces if p.strip())
    want = ["*" if WILD.match(w) else w for w in _words(line)]
    return any(_subsequence(want, _words(real)) for real in output.splitlines())


CPU = [(c, o) for c, o in commands() if RUN.match(c)]
GPU = [(c, o) for c, o in commands() if not RUN.match(c)]


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Path:
    """A lab folder laid out like the repo root: cluster.yaml, demo/ and benchmarks/; the store is ./results."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "cluster.yaml").write_text((REPO / "cluster.yaml").read_text())
    for name in ("demo", "benchmarks"):
        (folder / name).symlink_to(REPO / name)
    return folder


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    script = Path(sys.executable).with_name("labprobe")
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    argv = [str(script), *shlex.split(command)[1:]]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_readme_shows_commands_of_both_kinds():
    assert any(c.startswith("labprobe sweep") for c, _ in CPU) and any("carrier" in c for c, _ in GPU)
    assert len(CPU) >= 10, [c for c, _ in CPU]


@pytest.mark.parametrize("command, shown", CPU, ids=[c[:70] for c, _ in CPU])
def test_a_cpu_command_runs_as_written_and_gives_readmes_values(command, shown, lab):
    proc = run(command, lab)
    failing = any("[FAIL]" in line or "failed:" in line for line in shown) and "sweep" not in command
    assert proc.returncode == (1 if failing else 0), proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    missing = [line for line in expected(shown) if not shown_in(line, output)]
    assert not missing, f"README shows lines `{command}` does not print:\n" + "\n".join(missing) + "\n---\n" + output


@pytest.mark.parametrize("command, shown", GPU, ids=[c[:70] for c, _ in GPU])
def test_a_gpu_or_lab_command_parses(command, shown, monkeypatch):
    from runner.cli import COMMANDS
    from runner.cli.options import OneLineParser, build_config

    monkeypatch.chdir(REPO)
    argv = shlex.split(command)[1:]
    name = argv[0]
    module = __import__(COMMANDS[name][0], fromlist=["add_arguments"])
    parser = OneLineParser(prog=f"labprobe {name}")
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    if name == "probe":
        from probes.step.harness import load_harness
        from runner.cli.probe import probe_parser

        sub, probe = probe_parser(args.name)
        config = build_config(probe.Config, sub.parse_args(args.options))
        if hasattr(config, "harness"):
            load_harness(config.harness)  # a harness from the repo root, as README's command names it
