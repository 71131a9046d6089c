"""GPU idleness on a real card (issue 5): idle reads idle; a separate process's bf16 matmul loop reads
busy naming its pid, and a profile job refuses to start; once that process ends the card reads idle
again and the job runs.

Standalone on the GPU box (no Ray there): `PYTHONPATH=. python benchmarks/gpu_idle_check.py --out F`.
Prints one JSON line per step and writes them all to --out; exit 0 when every expectation held.

The matmul loop is started apart from this process (through `sh ... &`, so it is reparented away and
is no descendant of ours): a descendant would count as labprobe's own, as a job's worker would.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.gpu.idle import GpuBusyError, guard, read_local
from runner.gpu.nvml import FAKE_ENV

HOST = "gpu-box"

HOG = r"""
import sys, time, torch
a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
b = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
for _ in range(3):
    c = a @ b
torch.cuda.synchronize()
open(sys.argv[1], "w").write("ready")
end = time.time() + float(sys.argv[2])  # never outlive the check, even if nobody ends it
while time.time() < end:
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""

TINY_QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": 151936,
    "max_position_embeddings": 4096,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "hidden_act": "silu",
}


def log(steps: list[dict], step: str, ok: bool, **fields) -> None:
    entry = {"step": step, "ok": ok} | fields
    steps.append(entry)
    print(json.dumps(entry, default=str), flush=True)


def readings(runs_dir: str | None = None) -> tuple[list[dict], float]:
    t0 = time.perf_counter()
    got = [dataclasses.asdict(r) for r in read_local(HOST, runs_dir=runs_dir)]
    return got, time.perf_counter() - t0


def start_hog(work: Path, seconds: float) -> int:
    """Start the matmul loop detached; return its pid once it has the card (ready file)."""
    (work / "hog.py").write_text(HOG)
    ready = work / "ready"
    out = subprocess.run(
        ["sh", "-c", f'"{sys.executable}" "{work}/hog.py" "{ready}" {seconds} >"{work}/hog.log" 2>&1 & echo $!'],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(out.stdout.strip())
    deadline = time.time() + 120
    while not ready.exists():
        if time.time() > deadline or not alive(pid):
            raise RuntimeError(f"matmul loop did not start: {(work / 'hog.log').read_text()[-500:]}")
        time.sleep(0.2)
    return pid


def alive(pid: int) -> bool:
    """Running (a zombie left unreaped by a minimal init has already let go of the card)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def end_hog(pid: int) -> None:
    if alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.time() + 30
    while alive(pid) and time.time() < deadline:
        time.sleep(0.1)


def profile_job() -> dict:
    """What the GPU job wrapper does: guard first (raises GpuBusyError on a busy card), then the job."""
    card = guard(HOST)
    import torch

    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):
        a @ a
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(10):
        a @ a
    end.record()
    torch.cuda.synchronize()
    tflops = 10 * 2 * 8192**3 / (start.elapsed_time(end) / 1e3) / 1e12
    out = {
        "matmul_bf16_tflops": round(tflops, 1),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "device": torch.cuda.get_device_name(),
        "card": dataclasses.asdict(card),
    }
    out["profile"] = tiny_profile()
    return out


def tiny_profile() -> dict:
    """probes.profile.probe on a tiny random-weight Qwen3 where that probe exists; its failure is reported."""
    try:
        from probes.profile import probe as profile

        ckpt = Path(tempfile.mkdtemp(prefix="tiny-qwen3-"))
        (ckpt / "config.json").write_text(json.dumps(TINY_QWEN3))
        config = profile.Config(
            checkpoint=ckpt,
            weights="random",
            seq_lens=(256, 512, 1024),
            seq_len=512,
            warmup_steps=1,
            steps=3,
            max_steps=5,
            profile_steps=1,
        )
        t0 = time.perf_counter()
        result = profile.run(config)
        return {
            "ran": True,
            "wall_s": round(time.perf_counter() - t0, 2),
            "scaling_step_s": [r.step_s for r in result.tables.get("scaling", [])],
        }
    except Exception as exc:  # the check is about the guard; the probe's own state is reported as is
        return {"ran": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


def busy_with(rows: list[dict], pid: int) -> bool:
    return any(r["verdict"] == "busy" and pid in r["pids"] for r in rows)


def check(steps: list[dict], work: Path) -> None:
    rows, wall = readings()
    log(steps, "idle card reads idle", all(r["verdict"] == "idle" for r in rows), read_s=wall, readings=rows)
    pid = start_hog(work, seconds=240)
    try:
        hog_busy(steps, pid)
    finally:
        t0 = time.perf_counter()
        end_hog(pid)
    after_hog(steps, work, t0)


def hog_busy(steps: list[dict], pid: int) -> None:
    rows, wall = readings()
    log(steps, "matmul loop reads busy naming its pid", busy_with(rows, pid), hog_pid=pid, read_s=wall, readings=rows)
    try:
        profile_job()
        log(steps, "profile job refuses to start on the busy card", False, error="guard let it start")
    except GpuBusyError as exc:
        log(steps, "profile job refuses to start on the busy card", str(pid) in str(exc), error=str(exc))


def after_hog(steps: list[dict], work: Path, t0: float) -> None:
    # NVML's utilisation covers its last sample period (up to 1 s): the first window after the loop
    # ends may still see it. Read until idle, for at most 20 s, and report how long that took.
    num_reads = 0
    while True:
        rows, wall = readings()
        num_reads += 1
        idle = all(r["verdict"] == "idle" for r in rows)
        if idle or time.perf_counter() - t0 > 20:
            break
    log(
        steps,
        "after the loop ends the card reads idle again",
        idle,
        num_reads=num_reads,
        hog_end_to_idle_read_s=round(time.perf_counter() - t0, 2),
        read_s=wall,
        readings=rows,
    )
    t0 = time.perf_counter()
    try:
        out = profile_job()
        # tiny_profile reports the probe's failure instead of raising: the step holds only if it ran.
        log(
            steps, "the job runs", out["profile"]["ran"] is True, job_wall_s=round(time.perf_counter() - t0, 2), job=out
        )
    except GpuBusyError as exc:
        log(steps, "the job runs", False, error=str(exc))
    time.sleep(1.0)
    rows, wall = readings()
    log(
        steps,
        "our own job's process on the card is not counted",
        all(r["verdict"] == "idle" for r in rows) and any(os.getpid() in r["own_pids"] for r in rows),
        read_s=wall,
        readings=rows,
    )
    runs = work / "runs" / "exp1"
    runs.mkdir(parents=True)
    (runs / "metrics.jsonl").write_text("{}\n")
    rows, wall = readings(runs_dir=str(work / "runs"))
    log(
        steps,
        "a fresh file under the runs dir reads busy",
        all(r["verdict"] == "busy" and "metrics.jsonl" in r["reason"] for r in rows),
        read_s=wall,
        readings=rows,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="write the steps as a JSON list here")
    args = parser.parse_args()
    os.environ.pop(FAKE_ENV, None)  # real NVML only
    os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # guard picks the idle card itself
    steps: list[dict] = []
    import platform
    from importlib import metadata

    meta = {"python": platform.python_version(), "argv": sys.argv}
    try:
        import pynvml
        import torch

        pynvml.nvmlInit()
        meta |= {
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "torch": torch.__version__,
            "nvidia_ml_py": metadata.version("nvidia-ml-py"),
        }
        pynvml.nvmlShutdown()
        with tempfile.TemporaryDirectory(prefix="idle-check-") as work:
            check(steps, Path(work))
    except Exception as exc:
        log(steps, "check crashed", False, error=f"{type(exc).__name__}: {exc}")
    ok = bool(steps) and all(s["ok"] for s in steps)
    print(json.dumps({"all_ok": ok, "num_steps": len(steps)} | meta), flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"all_ok": ok, "meta": meta, "steps": steps}, indent=1, default=str))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
