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


def test_a_padding_job_records_torchs_version_and_cuda_build_without_importing_torch():
    """padding never uses torch: its Ray worker importing torch for the env cost ~2 CPU-s. The version and CUDA
    build are read from torch's installed files, equal to what torch says once imported; no card is named."""
    code = (
        "import json, sys\n"
        "from runner.dispatch.launch import execute\n"
        "from runner.lab.plan import Job\n"
        f"demo = {str(REPO / 'demo')!r}\n"
        "job = Job(plan='p', entry=0, probe='padding', checkpoint='qwen3-0.6b-base', host='local', corpus='demo',\n"
        "          config={}, config_hash='c', gpu=False,\n"
        "          paths={'checkpoint': demo + '/checkpoints/qwen3-0.6b-base', 'corpus': demo + '/corpus.jsonl'})\n"
        "outcome = execute(job)\n"
        "imported = 'torch' in sys.modules\n"
        "import torch\n"
        "print(json.dumps({'status': outcome.status, 'reason': outcome.reason, 'env': outcome.env,\n"
        "                  'imported': imported, 'cuda': torch.version.cuda or '', 'version': str(torch.__version__)}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    answer = json.loads(out.stdout.splitlines()[-1])
    assert answer["status"] == "ok", answer["reason"]
    assert answer["imported"] is False
    env = answer["env"]
    assert env["torch"] == answer["version"] and env["cuda"] == answer["cuda"]
    assert env["gpu"] == env["driver"] == ""


def test_a_cuda_builds_version_file_is_read_not_imported(tmp_path):
    """A CUDA build's torch/version.py, as PyPI's wheels write it, found first on the path; its package raises if
    imported, so the CUDA build can only have been read."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('imported')\n")
    (tmp_path / "torch" / "version.py").write_text(
        "from typing import Optional\n\n__version__ = '2.11.0+cu130'\ncuda: Optional[str] = '13.0'\nhip = None\n"
    )
    code = "from runner.hosts.jobenv import collect_env; print(collect_env()['cuda'])"
    env = {"PYTHONPATH": f"{tmp_path}:{REPO}", "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert out.stdout.strip() == "13.0", out.stderr[-2000:]
