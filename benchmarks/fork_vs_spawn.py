"""Does forking the measurement process from the preloaded server change a stack's step time on this host?

One stack (default bf16-autocast+compile+fused-adamw, issue 41's winner, the noisiest row of its searches) measured
through probes.step.variants.processes with the preload server (fork) and without it (LABPROBE_PRELOAD=0, spawn),
alternating spawn, fork, spawn, fork, ... so that drift of the host lands on both. Each line: mode, step_s, spread,
GPU busy share, gc collections while timed, the process's wall. The checkpoint's random weights, benchmarks.harness_plain.

    python benchmarks/fork_vs_spawn.py --checkpoint demo/checkpoints/qwen3-4b-base --seq-len 4096 --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measure(spec, mode: str) -> dict:
    from probes.step.variants import processes

    os.environ["LABPROBE_PRELOAD"] = "0" if mode == "spawn" else "1"
    m = processes.run(spec)
    gc = m.gc_during_timing or {}
    return {
        "mode": mode,
        "status": m.status,
        "step_s": m.step_s,
        "spread_pct": m.spread_pct,
        "gpu_busy_frac": m.gpu_busy_frac,
        "gc_collections": gc.get("collections"),
        "process_wall_s": round(m.process_wall_s or 0.0, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", default=str(ROOT / "demo/checkpoints/qwen3-4b-base"))
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--stack", default="bf16-autocast+compile+fused-adamw")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--pairs", type=int, default=2, help="spawn-fork pairs")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from probes.step.variants import stacks
    from probes.step.variants.measurement import Spec

    variant = stacks.get(args.stack)
    spec = Spec(
        checkpoint=args.checkpoint, harness="benchmarks.harness_plain", lora_alpha=64.0, ce_chunk=1024,
        variant=variant, weights="random", lora_rank=32, seq_len=args.seq_len, batch_size=args.batch_size,
        warmup_steps=3, steps=args.steps, max_steps=args.steps + 4, device="auto", profile_steps=1,
    )  # fmt: skip
    rows = []
    for _ in range(args.pairs):
        for mode in ("spawn", "fork"):
            rows.append(measure(spec, mode))
            print(json.dumps(rows[-1]), flush=True)
    for mode in ("spawn", "fork"):
        steps = [r["step_s"] for r in rows if r["mode"] == mode and r["step_s"]]
        if steps:
            print(f"{mode}: median {statistics.median(steps):.4f} s over {len(steps)} processes: {steps}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
