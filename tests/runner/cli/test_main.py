"""The entry point itself: `labprobe --version`."""

from __future__ import annotations

import subprocess
from importlib.metadata import version
from pathlib import Path

from runner.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_version_names_the_package_version_and_the_checkout_commit(capsys):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out.strip()
    sha = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out.startswith(f"labprobe {version('labprobe')}+g{sha}"), out
    assert len(out.splitlines()) == 1
