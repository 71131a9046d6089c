"""What a job records of its machine, and what recording it costs the job's process."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


def test_the_env_names_peft_s_and_transformers_versions_without_importing_them():
    """A padding or bucket job never uses either, a mask job never peft: importing them only to read their versions
    cost each Ray worker ~5 CPU-s."""
    code = (
        "import json, sys\n"
        "from runner.hosts.jobenv import collect_env\n"
        "env = collect_env()\n"
        "print(json.dumps({'env': env, 'imported': [m for m in ('peft', 'transformers') if m in sys.modules]}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    answer = json.loads(out.stdout.splitlines()[-1])
    assert answer["env"]["peft"] == metadata.version("peft")
    assert answer["env"]["transformers"] == metadata.version("transformers")
    assert answer["env"]["torch"]
    assert answer["imported"] == []
