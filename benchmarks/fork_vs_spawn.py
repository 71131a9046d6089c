"""Does forking the measurement process from the preloaded server change a stack's step time on this host?

One stack (default bf16-autocast+compile+fused-adamw, issue 41's winner, the noisiest row of its searches) measured
through probes.step.variants.processes with the preload server (fork) and without it (LABPROBE_PRELOAD=0, spawn),
in pairs whose order alternates (spawn then fork, fork then spawn, ...) so that neither mode always pays the first,
cold process, nor drift of the host lands on one mode. Each line: the mode asked, the path taken (`forked`: false
when the server did not serve and the process was spawned), status, step_s, spread, GPU busy share, gc collections
while timed, the process's wall. The checkpoint's random weights, benchmarks.harness_plain.

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
sys.path.insert(0, str(ROOT))  # benchmarks.harness_plain and probes, for this process and the workers it starts


def measure(spec, mode: str) -> dict:
    from probes.step.variants import preload, processes

    os.environ["LABPROBE_PRELOAD"] = "0" if mode == "spawn" else "1"
    served: list[bool] = []
    run = preload.run

    def traced(*args, **kwargs):  # whether the server took it (else processes spawns the worker itself)
        code = run(*args, **kwargs)
        served.append(code is not preload.UNSERVED)
        return code

    preload.run = traced
    try:
        m = processes.run(spec)
    finally:
        preload.run = run
    gc = m.gc_during_timing or {}
    return {
        "mode": mode,
        "forked": bool(served and served[-1]),
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

    spec = Spec(
        checkpoint=args.checkpoint, harness="benchmarks.harness_plain", lora_alpha=64.0, ce_chunk=1024,
        variant=stacks.get(args.stack), weights="random", lora_rank=32, seq_len=args.seq_len,
        batch_size=args.batch_size, warmup_steps=3, steps=args.steps, max_steps=args.steps + 4, device="auto",
        profile_steps=1,
    )  # fmt: skip
    rows = []
    for pair in range(args.pairs):
        for mode in ("spawn", "fork") if pair % 2 == 0 else ("fork", "spawn"):
            rows.append(measure(spec, mode))
            print(json.dumps(rows[-1]), flush=True)
    for mode in ("spawn", "fork"):
        steps = [r["step_s"] for r in rows if r["mode"] == mode and r["step_s"]]
        if steps:
            print(f"{mode}: median {statistics.median(steps):.4f} s over {len(steps)} processes: {steps}")
    if args.out:
        args.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
