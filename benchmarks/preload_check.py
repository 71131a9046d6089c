"""Is a fork of probes.step.variants.preload's server fresh for CUDA on this host, and what does it save?

1. The server's imports one by one in a fresh process, with torch.cuda.is_available() asked the default way
   and through NVML (PYTORCH_NVML_BASED_CUDA_CHECK=1, as the server runs): after each, whether torch
   initialised CUDA (and from where: torch.cuda._lazy_init traced), whether libcuda is mapped, which
   /dev/nvidia* files are open.
2. One baseline measurement (a checkpoint, random weights) three times through probes.step.variants.processes:
   twice forked from the server, once spawned (LABPROBE_PRELOAD=0): each one's wall, stages and step time,
   and the warnings logged (a refused server says why).

    python benchmarks/preload_check.py --checkpoint demo/checkpoints/qwen3-0.6b-base --seq-len 1024
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PROBE_IMPORTS = """
import json, os, sys, traceback
import torch.cuda
_lazy_init = torch.cuda._lazy_init
def _traced(*args, **kwargs):  # who initialises CUDA while importing, if anyone does
    print(json.dumps({"cuda_init_from": traceback.format_stack()[-12:-1]}), flush=True)
    return _lazy_init(*args, **kwargs)
torch.cuda._lazy_init = _traced
def state(stage):
    import torch
    with open("/proc/self/maps") as maps:
        libcuda = any("/libcuda.so" in line for line in maps)
    fds = sorted({os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}").startswith("/dev/nv")})
    print(json.dumps({"stage": stage, "torch_initialized": torch.cuda.is_initialized(), "libcuda": libcuda,
                      "nvidia_fds": fds}), flush=True)
import torch; state("torch")
import transformers; state("transformers")
import peft.tuners.lora; state("peft")
import torch.profiler; state("torch.profiler")
from transformers import AutoModelForCausalLM; state("AutoModelForCausalLM")
from probes.step.variants import worker; state("worker")
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING
from probes.step.train.checkpoint import load_text_config
from pathlib import Path
MODEL_FOR_CAUSAL_LM_MAPPING[type(load_text_config(Path(sys.argv[1])))]; state("model class")
print(json.dumps({"is_available": torch.cuda.is_available()}))
state("after is_available")
"""


def imports(checkpoint: str) -> dict:
    found = {}
    for nvml in ("0", "1"):
        path = os.pathsep.join([str(ROOT), *(p for p in sys.path if p)])
        env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": nvml, "PYTHONPATH": path}
        out = subprocess.run(
            [sys.executable, "-c", PROBE_IMPORTS, checkpoint], capture_output=True, text=True, env=env, check=False
        )
        found[f"nvml_check={nvml}"] = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        if out.returncode:
            found[f"nvml_check={nvml}_error"] = out.stderr[-800:]
    return found


def measurements(checkpoint: str, seq_len: int) -> list[dict]:
    from probes.step.variants import catalog, processes
    from probes.step.variants.measurement import Spec

    spec = Spec(
        checkpoint=checkpoint, harness="benchmarks.harness_plain", lora_alpha=64.0, ce_chunk=0,
        variant=catalog.BASELINE_VARIANT, weights="random", lora_rank=32, seq_len=seq_len, batch_size=1,
        warmup_steps=3, steps=10, max_steps=10, device="auto",
    )  # fmt: skip
    rows = []
    for preload in ("1", "1", "0"):
        os.environ["LABPROBE_PRELOAD"] = preload
        m = processes.run(spec)
        rows.append(
            {
                "preload": preload,
                "status": m.status,
                "process_wall_s": round(m.process_wall_s, 2),
                "stage_s": m.stage_s,
                "step_s": m.step_s,
                "spread_pct": m.spread_pct,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(ROOT / "demo/checkpoints/qwen3-0.6b-base"))
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--imports-only", action="store_true", help="step 1 only")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    report = {"imports": imports(args.checkpoint)}
    for key, stages in report["imports"].items():
        print(key, json.dumps(stages)[:1500], flush=True)
    if not args.imports_only:
        report["measurements"] = measurements(args.checkpoint, args.seq_len)
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
