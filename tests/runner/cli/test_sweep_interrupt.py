"""A sweep interrupted and in odd surroundings, as real processes: a double Ctrl-C (exit 130, Ray shut
down, no Ray process of that run left), an unwritable TMPDIR (one line, exit 2), and a forced-ASCII
locale with non-ASCII paths (printed without UnicodeEncodeError)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": True,
    "torch_dtype": "float32",
    "hidden_act": "silu",
}


def write_lab(root: Path, num_jobs: int = 1) -> Path:
    (root / "ckpt" / "tiny").mkdir(parents=True)
    (root / "ckpt" / "tiny" / "config.json").write_text(json.dumps(TINY_QWEN3))
    entries = "".join(
        f"    - {{probe: mask, hosts: [local], config: {{seq_len: {16 * (i + 1)}}}}}\n" for i in range(num_jobs)
    )
    cluster = root / "cluster.yaml"
    cluster.write_text(
        "store: {root: ./results}\n"
        "hosts:\n  - {name: local, address: 127.0.0.1, checkpoints_root: ckpt}\n"
        "checkpoints:\n  - {name: tiny, path: tiny}\n"
        "plans:\n  night:\n" + entries
    )
    return cluster


def sweep(cluster: Path, env: dict[str, str], **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "runner.cli", "sweep", "--cluster", str(cluster), "--plan", "night"],
        cwd=cluster.parent,
        env={**os.environ, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def processes_naming(text: str) -> list[str]:
    """Command lines of live processes that mention `text` (Ray's processes name their session folder)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().split(") ", 1)[1][0]
        except (OSError, IndexError):
            continue
        if text in cmdline and state != "Z":
            found.append(f"{proc.name}: {cmdline[:200]}")
    return found


def test_a_double_ctrl_c_exits_130_with_ray_shut_down_and_no_agents_left(tmp_path):
    cluster = write_lab(tmp_path / "lab", num_jobs=4)
    ray_tmp = Path(tempfile.mkdtemp(prefix="lp-int-", dir="/tmp"))  # Ray's socket paths must stay short
    try:
        interrupt_twice(cluster, ray_tmp)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)


def interrupt_twice(cluster: Path, ray_tmp: Path) -> None:
    proc = sweep(cluster, {"TMPDIR": str(ray_tmp)})
    deadline = time.monotonic() + 120
    # Wait for Ray's agents (raylet, GCS, workers: each names the session under our TMPDIR) and a job.
    while time.monotonic() < deadline and proc.poll() is None:
        if any("raylet" in p for p in processes_naming(str(ray_tmp))) and list(ray_tmp.rglob("worker-*.out")):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    # The second Ctrl-C lands while the first is being handled (Ray shutting down): it used to
    # raise KeyboardInterrupt inside ray.shutdown or abort in Ray's C++ (exit 134).
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if "interrupted" in line:
            break
    proc.send_signal(signal.SIGINT)
    time.sleep(0.05)
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    _, rest = proc.communicate(timeout=120)
    err = "".join(lines) + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "terminate called" not in err and "KeyboardInterrupt" not in err, err
    left = processes_naming(str(ray_tmp))
    for _ in range(50):  # Ray's processes exit on their own once the driver shut them down
        if not left:
            break
        time.sleep(0.2)
        left = processes_naming(str(ray_tmp))
    assert left == []


def test_an_unwritable_tmpdir_is_one_line_exit_2(tmp_path):
    cluster = write_lab(tmp_path / "lab")
    not_a_folder = tmp_path / "tmpfile"
    not_a_folder.write_text("")
    proc = sweep(cluster, {"TMPDIR": str(not_a_folder)})
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and len(err.strip().splitlines()) == 1 and "TMPDIR" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_a_forced_ascii_locale_prints_non_ascii_paths(tmp_path, command):
    cluster = write_lab(tmp_path / "läb-ü")
    env = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": ""}
    argv = [sys.executable, "-m", "runner.cli", command, "--cluster", str(cluster)]
    argv += ["--plan", "night", "--inline", "local"] if command == "sweep" else []
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONIOENCODING", "LANG", "LC_CTYPE")}
    proc = subprocess.run(
        argv,
        cwd=cluster.parent,
        env={**clean, "PYTHONPATH": str(REPO), "RAY_AUTH_MODE": "disabled", **env},
        capture_output=True,
        timeout=300,
    )
    err = proc.stderr.decode("utf-8", "replace")
    assert proc.returncode == 0 and "UnicodeEncodeError" not in err and "Traceback" not in err, err
    assert command == "validate" or b"1 ok, 0 failed" in proc.stdout, proc.stdout
