"""`labprobe probe NAME [options]`: run one probe inline and print its tables (or --json).

A probe that runs on a GPU (its Config has `device`: profile, carrier, replay) first reads this
machine's GPUs with the sweep's idleness verdict (runner.gpu.idle) and refuses, in one line
naming the busy process (pid, user, memory) or the fresh run file, exit 1, unless --no-idle-check:
measuring beside someone's training run spoils both.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
from pathlib import Path

import probes
from probes.result import loads
from runner.cli.options import (
    OneLineParser,
    add_config_options,
    build_config,
    options_named,
)
from runner.gpu.idle import check_direct
from runner.hosts.jobenv import spare_collector
from runner.tables import format_table


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "name", metavar="NAME", help="probe: " + "; ".join(f"{n} ({s.settles})" for n, s in probes.REGISTRY.items())
    )
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the probe's options (NAME --help)")


def probe_parser(name: str) -> tuple[argparse.ArgumentParser, type]:
    module = probes.get(name)
    parser = OneLineParser(
        prog=f"labprobe probe {name}",
        description=(module.__doc__ or "").strip(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser, module.Config)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    if "device" in getattr(module.Config, "__dataclass_fields__", {}):
        parser.add_argument(
            "--no-idle-check", action="store_true", help="run even when the GPU reads busy (or cannot be read)"
        )
        parser.add_argument(
            "--runs-dir", default=None, help="a training runs directory: a file changed there lately means busy"
        )
    return parser, module


def main(args: argparse.Namespace) -> int:
    parser, module = probe_parser(args.name)
    options = parser.parse_args(args.options)
    config = build_config(module.Config, options)
    warning = slow_on_cpu(args.name, config)
    if warning:  # say so before minutes of silence, and show each timed point or process as it ends
        print(f"labprobe probe {args.name}: {warning}", file=sys.stderr, flush=True)
        progress = logging.getLogger("probes")
        progress.addHandler(logging.StreamHandler(sys.stderr))
        progress.setLevel(logging.INFO)
    if hasattr(options, "no_idle_check") and not options.no_idle_check:
        refusal = check_direct(socket.gethostname(), config.device, runs_dir=options.runs_dir)
        if refusal is not None:
            print(
                f"labprobe probe {args.name}: not run, the GPU is not idle: {refusal} (--no-idle-check to run anyway)",
                file=sys.stderr,
            )
            return 1
    spare_collector()
    with options_named():
        result = module.run(config)
    return show(result, as_json=options.json)


TINY_PARAMS = 50_000_000
"""Above this, a LoRA step on a CPU takes seconds to minutes (a 0.6B model's 4,096-token step: ~1 min)."""


def slow_on_cpu(name: str, config) -> str | None:
    """Why this run will be slow here (a probe the registry marks `slow_on_cpu` timing a model that is not tiny
    on the CPU), or None."""
    if not probes.REGISTRY[name].slow_on_cpu or getattr(config, "steps", 1) == 0:
        return None
    if config.device not in ("auto", "cpu"):
        return None
    import torch

    if config.device == "auto" and torch.cuda.is_available():
        return None
    found = config.checkpoint if isinstance(config.checkpoint, tuple) else (config.checkpoint,)
    big = {Path(c).name: n for c in found if (n := approx_params(Path(c))) > TINY_PARAMS}
    if not big:
        return None
    sizes = ", ".join(f"{k} (about {n / 1e9:.1f}B parameters)" for k, n in big.items())
    return f"no GPU here: timing {sizes} on the CPU takes minutes or more; progress follows (Ctrl-C stops)"


def approx_params(checkpoint: Path) -> int:
    """Embedding plus attention and MLP weights from config.json (0 when unreadable: no warning)."""
    try:
        cfg = loads((checkpoint / "config.json").read_text())
        cfg = cfg.get("text_config", cfg)
        h, i, n = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
        return int(cfg["vocab_size"] * h + n * (4 * h * h + 3 * h * i))
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def show(result: probes.ProbeResult, *, as_json: bool) -> int:
    """Print a result (its tables, or one JSON object) and return the exit code its checks give."""
    if as_json:
        json.dump(result.to_json_dict(), sys.stdout, indent=1)
        print()
    else:
        print(render(result))
    return 0 if result.ok else 1


def render(result: probes.ProbeResult) -> str:
    parts = []
    for name in result.tables:
        parts.append(format_table(_without_empty_columns(result.records(name)), title=f"== {result.probe}.{name}"))
    if result.summary:
        parts.append("== summary\n" + "\n".join(_summary_line(k, v) for k, v in result.summary.items()))
    if result.checks:
        parts.append(
            "== checks\n" + "\n".join(f"  [{'ok' if c.ok else 'FAIL'}] {c.name}: {c.detail}" for c in result.checks)
        )
    return "\n\n".join(parts)


def _without_empty_columns(records: list[dict]) -> list[dict]:
    """Columns with no value in any row left out (`carrier --steps 0` measures no time: 23 of them)."""
    keep = [k for k in dict.fromkeys(k for r in records for k in r) if any(r.get(k) not in (None, "") for r in records)]
    return [{k: r.get(k) for k in keep} for r in records]


def _summary_line(key: str, value) -> str:
    """`key: value`; a list of texts (carrier's and profile's ranked `advice`) one numbered line each."""
    if key == "advice" and isinstance(value, list) and value:
        return f"  {key}:\n" + "\n".join(f"    {i}. {v}" for i, v in enumerate(value, 1))
    return f"  {key}: {value}"
