"""Runs as a trainer leaves them, full no-follow listings, and a private mount namespace: the
real trees `labprobe purge` tests work on (tests/runner/chores/)."""

from __future__ import annotations

import hashlib
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write(path: Path, num_bytes: int, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes((seed + i * 7) % 251 for i in range(num_bytes)))


def write_weights(path: Path, seed: int = 0, rank: int = 8) -> None:
    """A real PEFT-style safetensors file (safetensors' own writer): two LoRA matrices of `rank`
    (16 x rank floats each)."""
    import numpy as np
    from safetensors.numpy import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    save_file(
        {
            "base_model.model.q_proj.lora_A.weight": rng.standard_normal((rank, 16), dtype=np.float32),
            "base_model.model.q_proj.lora_B.weight": rng.standard_normal((16, rank), dtype=np.float32),
        },
        str(path),
    )


def make_run(root: Path, name: str | bytes, ckpt_bytes: int = 3000, adapter: bool = True) -> Path:
    """A run as a trainer leaves it: two intermediate checkpoints, a final adapter, a merged model.
    A bytes name is any byte string the filesystem takes (not necessarily UTF-8)."""
    run = root / (os.fsdecode(name) if isinstance(name, bytes) else name)
    write(run / "checkpoints" / "step-100" / "adapter_model.safetensors", ckpt_bytes, 1)
    write(run / "checkpoints" / "step-100" / "optimizer.pt", 2 * ckpt_bytes, 2)
    write(run / "checkpoints" / "step-200" / "adapter_model.safetensors", ckpt_bytes, 3)
    if adapter:
        write_weights(run / "adapter" / "adapter_model.safetensors", 4)
        (run / "adapter" / "adapter_config.json").write_text('{"r": 8}')
    write(run / "merged" / "model.safetensors", 500, 5)
    (run / "train.log").write_text("done\n")
    return run


def listing(top: Path) -> dict[str, str]:
    """Every entry under `top`, never following a symlink: path -> what it is (and its sha256).
    Only regular files are read (a FIFO listed here never blocks)."""
    out = {}
    for folder, dirs, files in os.walk(top, followlinks=False):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(top))
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode):
                out[rel] = "link:" + os.readlink(path)
            elif stat.S_ISDIR(mode):
                out[rel] = "dir"
            elif stat.S_ISREG(mode):
                out[rel] = "file:" + hashlib.sha256(path.read_bytes()).hexdigest()
            else:
                out[rel] = f"special:{stat.S_IFMT(mode):o}"
    return out


def python(code: str, *, timeout_s: float, binds: list[tuple[Path, Path]] = ()) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python with this tree first on the path; with `binds`, inside a
    private mount namespace (`unshare -m --propagation private`) where each (source, target) is
    bind-mounted first: the mounts vanish with the process and are never seen outside it."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = [sys.executable, "-c", code]
    if binds:
        mounts = " && ".join(f"mount --bind {shlex.quote(str(s))} {shlex.quote(str(t))}" for s, t in binds)
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", f"{mounts} && exec {shlex.join(argv)}"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)


def private_mounts_refused() -> str:
    """Why a private mount namespace with a bind mount cannot be made here ("" when it can)."""
    probe = ["unshare", "-m", "--propagation", "private", "sh", "-c", "mount --bind / /mnt"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare cannot run: {exc}"
    return "" if done.returncode == 0 else f"unshare -m / mount --bind not permitted: {done.stderr.strip()}"


def dry_run_then_yes(cluster: Path, store: Path, *extra: str, capsys=None) -> int:
    """`labprobe purge` (the dry run, which stores its plan), then `--yes --plan <its id>` with
    `extra`, in this process; with `capsys`, the dry run's output is dropped."""
    from runner.chores.plans import newest_plan_id
    from runner.cli import main
    from runner.store.store import Store

    assert main(["purge", "--cluster", str(cluster)]) in (0, 1)
    if capsys is not None:
        capsys.readouterr()
    plan_id = newest_plan_id(Store(store))
    return main(["purge", "--cluster", str(cluster), "--yes", "--plan", plan_id, *extra])
