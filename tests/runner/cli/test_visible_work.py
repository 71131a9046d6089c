"""Visible work: `labprobe sweep` says it is starting before its heavy imports, and a GPU probe that will be
slow on this CPU (a model that is not tiny) says so before it starts, then logs its progress."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sweep_util import tiny_qwen3

import probes
from probes.result import make_config
from runner.cli import main
from runner.cli.probe import slow_on_cpu

DEMO = Path(__file__).resolve().parents[3] / "demo" / "checkpoints"


def _config(name: str, checkpoint: Path, **more):
    module = probes.get(name)
    value = (checkpoint,) if name == "carrier" else checkpoint
    return make_config(module.Config, {"checkpoint": value, "weights": "random", "device": "cpu", **more})


def test_a_large_model_on_the_cpu_is_announced_and_a_tiny_one_or_counts_only_is_not(tmp_path):
    tiny_checkpoint = tmp_path / "tiny"
    tiny_qwen3(tiny_checkpoint)
    said = slow_on_cpu("profile", _config("profile", DEMO / "qwen3-0.6b-base"))
    assert said is not None and "qwen3-0.6b-base (about 0.5B parameters)" in said and "no GPU here" in said
    assert slow_on_cpu("carrier", _config("carrier", DEMO / "qwen3-4b-base", steps=0)) is None
    assert slow_on_cpu("profile", _config("profile", tiny_checkpoint)) is None


def test_sweep_says_it_is_starting_first_on_a_terminal_and_errors_stay_one_line_elsewhere(tmp_path):
    import os
    import pty

    script = Path(sys.executable).with_name("labprobe")
    argv = [str(script), "sweep", "--cluster", str(tmp_path / "none.yaml")]
    main_fd, terminal = pty.openpty()
    proc = subprocess.run(argv, stderr=terminal, stdout=subprocess.DEVNULL, timeout=120, check=False)
    os.close(terminal)
    seen = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        seen += chunk
    os.close(main_fd)
    lines = seen.decode().splitlines()
    assert proc.returncode == 2 and lines[0].startswith("labprobe sweep: starting"), lines
    piped = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert piped.returncode == 2 and len(piped.stderr.strip().splitlines()) == 1, piped.stderr


def test_help_does_not_announce_a_start(capsys):
    assert main(["sweep", "--help"]) == 0
    assert "starting" not in capsys.readouterr().err
