"""`labprobe`: a thin entry point. It parses, builds, launches, writes; nothing else.

Each subcommand lives in its own module with `add_arguments(parser)` and `main(args) -> int`;
only the invoked one is imported, so `labprobe probe padding` never pays for Ray or torch.
Exit codes: 0 all checks passed / all jobs ran, 1 a check or job failed, 2 bad input.
"""

from __future__ import annotations

import importlib
import sys

from runner.log import say
from runner.log import setup as setup_logging

# name -> (module, one-line help); `commands()` adds each probe's own command after `probe`
RUNNER_COMMANDS: dict[str, tuple[str, str]] = {
    "probe": ("runner.cli.probe", "run one probe inline on this machine"),
    "sweep": ("runner.cli.sweep", "run a plan of probes over the lab's hosts with Ray"),
    "status": ("runner.cli.status", "what is running on the store: the sweep, its plan, its jobs done and left"),
    "validate": ("runner.cli.validate", "check cluster.yaml and expand every plan, running nothing"),
    "recommend": ("runner.cli.recommend", "which carrier, on which host, how many hours for the lab's budget"),
    "compare": ("runner.cli.compare", "compare hosts on the same work from the store"),
    "host-command": ("runner.cli.host_command", "print the `ray start` line for one host"),
    "idle": ("runner.cli.idle", "read every GPU of the lab through NVML: idle or busy, and why"),
    "schedule": ("runner.cli.schedule", "install, remove, show or run the overnight sweep's crontab entry"),
    "history": ("runner.cli.history", "a metric over past runs, with drift alerts"),
    "report": ("runner.cli.report", "the HTML morning report of any run (default: the newest)"),
    "purge": ("runner.cli.purge", "safely purge intermediate checkpoints across hosts"),
    "demo": ("runner.cli.demo", "load the demo's recorded sample of real H200 results into the store"),
    "store": ("runner.cli.store", "check, compact, vacuum, migrate or export (plain Parquet) the store's Delta tables"),
}


PROBE_COMMAND = "runner.cli.goodput"
"""The module of a probe's own command (`labprobe NAME`: the probe priced with the store's results)."""


def commands() -> dict[str, tuple[str, str]]:
    """Every command: the runner's, with each probe's own (a registry entry with a `command`) after `probe`."""
    import probes  # ~0.1 s (pydantic): paid only to list the commands or run one of a probe

    own = {name: (PROBE_COMMAND, spec.command) for name, spec in probes.REGISTRY.items() if spec.command}
    first, *rest = RUNNER_COMMANDS.items()
    return dict([first, *own.items(), *rest])


def __getattr__(name: str):
    if name == "COMMANDS":  # every command, built when read (tests and docs read it)
        return commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _top_help() -> str:
    known = commands()
    width = max(map(len, known))
    lines = [
        "usage: labprobe COMMAND [options]   (labprobe COMMAND --help for its options)",
        "       labprobe --version",
        "",
        "commands:",
    ]
    lines += [f"  {name.ljust(width)}  {help_}" for name, (_, help_) in known.items()]
    return "\n".join(lines)


def _never_unencodable() -> None:
    """Under an ASCII locale (LC_ALL=C, PYTHONUTF8=0) a non-ASCII path would raise UnicodeEncodeError
    when printed: print it escaped instead."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", "") or "").lower().replace("-", "")
        if encoding != "utf8" and hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(_top_help())
        return 0 if argv else 2
    if argv[0] == "--version":
        from runner.hosts.jobenv import code_version

        print(f"labprobe {code_version()}")  # the package version, and the commit of a git checkout
        return 0
    _never_unencodable()
    setup_logging()
    name = argv[0]
    known = RUNNER_COMMANDS if name in RUNNER_COMMANDS else commands()
    if name not in known:
        print(f"labprobe: error: unknown command {name!r} (known: {', '.join(known)})", file=sys.stderr)
        return 2
    if name == "sweep" and not {"-h", "--help"} & set(argv[1:]):  # its imports (Ray, the store) take seconds
        say("labprobe sweep: starting (loading Ray, the store and the probes)")
    return _run(name, known[name], argv[1:])


def _run(name: str, command: tuple[str, str], argv: list[str]) -> int:
    # Imported here, after the first line: pydantic (probes.result) alone takes ~0.3 s
    from probes.result import InputError
    from runner.cli.options import OneLineParser

    module = importlib.import_module(command[0])
    parser = OneLineParser(prog=f"labprobe {name}", description=command[1])
    module.add_arguments(parser)
    try:
        args = parser.parse_args(argv)
        return int(module.main(args))
    except InputError as exc:
        print(f"labprobe {name}: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse's --help (0) and usage errors (2), as a return code
        return exc.code if isinstance(exc.code, int) else 2
    except KeyboardInterrupt:
        print(f"labprobe {name}: interrupted", file=sys.stderr)
        return 130
