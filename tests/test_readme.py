"""README and docs/ as a test: every `$ labprobe ...` command README.md and docs/*.md show is run here (those that run
on a CPU) from a lab folder laid out like the repo root, on one store per session: the demo sweep README's set-up
command ends with, and the recorded sample, made once before any other command (a page showing either one's output
is checked against that run). Those two and every command that starts Ray or writes outside the store run as the
console script (so nothing relies on `python -m` or PYTHONPATH); the rest (probes, store readers) run through the
same entry point inside the test process, where torch and transformers are already imported (~6 CPU-s a mask command
otherwise). Its exit code must be 0 (1 where the page shows a failing check) and every output line the page shows
must be in the output: table rows and headers as ordered subsequences of a real line's words (the pages excerpt
columns), checks and `key: value` pieces as text; run ids, timings and store paths are wildcards. A line with a
trailing `# ...` comment is illustrative. GPU commands (and those reading a lab's hosts) are parsed through the
CLI's own parsers and Config checks, and their `--harness` imported from the repo root. Every `ray start` line the
pages show parses with the installed Ray's own command line, and every relative link points at a file."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README = (REPO / "README.md").read_text()
MAX_README_LINES = 200
RUN = re.compile(
    r"^labprobe (probe (mask|padding|bucket|goodput)|sweep|status|demo|compare|history|recommend|host-command|validate"
    r"|schedule install --crontab-file)\b"
)
WILD = re.compile(
    r"^(\d{8}T\d{6}Z-[0-9a-f]{4}:?|\[?\d+/\d+|\d+\.\d+s\]?|\(?\.?/[\w./-]*\)?[:;,]?|\d{4}-\d\d-\d\dT\S*)$"
)
# Fenced blocks, indented ones (in a list item) too: the indent, the language, the body.
FENCE = re.compile(r"^( *)```([a-z]*)\n(.*?)^\1```", flags=re.S | re.M)
SETUP = ["labprobe sweep", "labprobe demo load-sample"]  # the session's store, in this order


def name(page: Path) -> str:
    return str(page.relative_to(REPO))


def blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced block of a page, a list item's indent taken off."""
    found = []
    for indent, language, body in FENCE.findall(text):
        found.append(
            (language, [line[len(indent) :] if line.startswith(indent) else line for line in body.splitlines()])
        )
    return found


def commands(text: str) -> list[tuple[str, list[str]]]:
    """(command, the page's output lines) of every `labprobe` line in a fenced block, in the page's order."""
    found: list[tuple[str, list[str]]] = []
    for language, lines in blocks(text):
        if language == "text":  # what a command printed, shown alone: nothing to run
            continue
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


SHOWN = [(name(page), c, o) for page in PAGES for c, o in commands(page.read_text())]
CPU = [(p, c, o) for p, c, o in SHOWN if RUN.match(c)]
GPU = [(p, c, o) for p, c, o in SHOWN if not RUN.match(c)]


def _id(page: str, command: str) -> str:
    return f"{Path(page).stem}: {command[:70]}"


@pytest.fixture(scope="session")
def lab(tmp_path_factory) -> Path:
    """A lab folder laid out like the repo root: cluster.yaml, demo/ and benchmarks/; the store is ./results."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "cluster.yaml").write_text((REPO / "cluster.yaml").read_text())
    for sub in ("demo", "benchmarks"):
        (folder / sub).symlink_to(REPO / sub)
    return folder


@pytest.fixture(scope="session")
def ran(lab) -> dict[str, subprocess.CompletedProcess]:
    """Each command's run, once a session (a command two pages show is run once). The session's store comes
    first, whatever order the pages' commands run in: README's demo sweep, then the recorded sample."""
    return {command: run(command, lab) for command in SETUP}


IN_PROCESS = ("probe", "compare", "history", "recommend", "status", "validate", "host-command")
"""Commands that start no Ray and write nothing but their output: run by runner.cli.main in this process."""


def run(command: str, cwd: Path) -> subprocess.CompletedProcess:
    if command not in SETUP and shlex.split(command)[1] in IN_PROCESS:
        return run_in_process(command, cwd)
    script = Path(sys.executable).with_name("labprobe")
    env = {**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")}
    argv = [str(script), *shlex.split(command)[1:]]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)


def run_in_process(command: str, cwd: Path) -> subprocess.CompletedProcess:
    """runner.cli.main, the console script's entry point, in `cwd`, its output captured as the script's would be."""
    import contextlib
    import io

    from runner.cli import main

    argv = shlex.split(command)[1:]
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:  # argparse's own exits
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def test_readme_is_a_front_page_of_at_most_200_lines():
    assert len(README.splitlines()) <= MAX_README_LINES, f"README.md: {len(README.splitlines())} lines"


def test_readme_keeps_the_two_commands():
    """The set-up + demo sweep command, whose last part is the session's first setup command, and CI's."""
    bash = [lines for language, lines in blocks(README) if language == "bash"]
    main = "python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e . && labprobe sweep"
    assert bash[:2] == [[main], ["bash .ci/run"]]
    assert main.rsplit(" && ", 1)[1] == SETUP[0]
    ci = (REPO / ".ci" / "run").read_text()
    assert "torch==2.13.0" in ci  # CI pins the CPU wheel


def test_the_pages_show_commands_of_both_kinds():
    assert any(c == SETUP[0] for _, c, _ in CPU) and any("carrier" in c for _, c, _ in GPU)
    assert len(CPU) >= 10, [c for _, c, _ in CPU]
    assert {name(p) for p in PAGES} >= {"README.md", "docs/cluster.md", "docs/store.md", "docs/mask.md"}


@pytest.mark.parametrize("page, command, shown", CPU, ids=[_id(p, c) for p, c, _ in CPU])
def test_a_cpu_command_runs_as_written_and_gives_the_pages_values(page, command, shown, lab, ran):
    if command not in ran:
        ran[command] = run(command, lab)
    proc = ran[command]
    failing = any("[FAIL]" in line or "failed:" in line for line in shown) and "sweep" not in command
    assert proc.returncode == (1 if failing else 0), proc.stderr[-2000:]
    output = proc.stdout + proc.stderr
    missing = [line for line in expected(shown) if not shown_in(line, output)]
    assert not missing, f"{page} shows lines `{command}` does not print:\n" + "\n".join(missing) + "\n---\n" + output


@pytest.mark.parametrize("page, command, shown", GPU, ids=[_id(p, c) for p, c, _ in GPU])
def test_a_gpu_or_lab_command_parses(page, command, shown, monkeypatch):
    from runner.cli import COMMANDS
    from runner.cli.options import OneLineParser, build_config

    monkeypatch.chdir(REPO)
    argv = shlex.split(command)[1:]
    cmd = argv[0]
    module = __import__(COMMANDS[cmd][0], fromlist=["add_arguments"])
    parser = OneLineParser(prog=f"labprobe {cmd}")
    module.add_arguments(parser)
    args = parser.parse_args(argv[1:])
    if cmd == "probe":
        from probes.step.harness import load_harness
        from runner.cli.probe import probe_parser

        sub, probe = probe_parser(args.name)
        config = build_config(probe.Config, sub.parse_args(args.options))
        if hasattr(config, "harness"):
            load_harness(config.harness)  # a harness from the repo root, as the page's command names it


def ray_start_lines() -> list[tuple[str, str]]:
    """(page, arguments) of every `ray start` line in the pages' fenced blocks, continuations joined; what
    precedes `ray start` (environment, a path, `@reboot sleep 60 &&`) and a trailing redirection left out."""
    found = []
    for page in PAGES:
        for _, lines in blocks(page.read_text()):
            text = re.sub(r"\\\n\s*", " ", "\n".join(lines))
            for line in text.splitlines():
                match = re.search(r"\bray start (.*)", line.lstrip("$ "))
                if match:
                    found.append((name(page), re.split(r"\s+(?:>>?|2>&1)", match.group(1))[0]))
    return found


RAY_START = ray_start_lines()


def test_the_pages_show_ray_start_lines():
    """The head's and a worker's line, and the checklist's with pinned ports and the node's address."""
    args = " ".join(a for _, a in RAY_START)
    assert len(RAY_START) >= 4
    for flag in (
        "--head",
        "--address",
        "--node-ip-address",
        "--node-manager-port",
        "--object-manager-port",
        "--min-worker-port",
        "--max-worker-port",
        "--labels",
        "--block",
    ):
        assert flag in args, flag


@pytest.mark.parametrize("page, arguments", RAY_START, ids=[_id(p, a) for p, a in RAY_START])
def test_a_ray_start_line_parses_with_rays_own_command_line(page, arguments):
    """Every flag a page gives `ray start` exists in this Ray (hidden ones such as --labels too) and takes the
    value given: Ray's click command parses the line without starting anything."""
    from ray.scripts.scripts import start

    context = start.make_context("ray start", shlex.split(arguments))
    labels = context.params["labels"]
    assert labels.startswith("labprobe.host="), (page, labels)
    if context.params["head"]:
        assert context.params["port"] == 6379
    else:
        assert context.params["address"].endswith(":6379")


LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_relative_link_of_a_page_points_at_a_file(page):
    links = [t for t in LINK.findall(page.read_text()) if "://" not in t]
    missing = [t for t in links if not (page.parent / t).exists()]
    assert not missing, f"{name(page)} links to files that do not exist: {missing}"
