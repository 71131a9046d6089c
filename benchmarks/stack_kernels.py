"""Where a stack's step time goes: the carrier probe's kernel table of the baseline and of each `--variant`,
by category, side by side (ms per step and share), from one carrier run; the evidence JSON kept whole.

    python benchmarks/stack_kernels.py --checkpoint demo/checkpoints/qwen3-4b-base --seq-len 4096 \\
        --variant bf16-autocast+compile+fused-adamw --out stack_kernels.json

Random weights through benchmarks.harness_plain (the issue-41 search's harness). On a CPU the rows are CPU ops.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from probes.carrier import probe as carrier  # noqa: E402


def table(evidence: dict) -> list[str]:
    """One line per (model, category): each row's ms per step, then the variants' minus the baseline's."""
    lines = []
    for model, rows in evidence.items():
        names = list(rows)
        by = {n: {r["category"]: r["kernel_s_per_step"] for r in rows[n].get("kernel_table") or []} for n in names}
        categories = sorted({c for n in names for c in by[n]}, key=lambda c: -by["baseline"].get(c, 0.0))
        lines.append(f"{model}: kernel ms per step by category ({' | '.join(names)})")
        for c in [*categories, "total"]:
            ms = [1e3 * (sum(by[n].values()) if c == "total" else by[n].get(c, 0.0)) for n in names]
            lines.append(f"  {c:20s} " + "  ".join(f"{v:9.2f}" for v in ms))
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--variant", action="append", default=[])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    config = carrier.Config(
        checkpoint=(args.checkpoint,),
        weights="random",
        harness="benchmarks.harness_plain",
        seq_len=args.seq_len,
        batch_size=args.batch_size,
        warmup_steps=2,
        steps=5,
        max_steps=8,
        processes=1,
        numerics_steps=0,
        device=args.device,
        variant=("baseline", *args.variant),
    )
    result = carrier.run(config)
    evidence = json.loads(result.artifacts["evidence.json"])
    rows = [
        {k: getattr(r, k) for k in ("variant", "step_s", "gpu_busy_frac", "status")} for r in result.tables["carriers"]
    ]
    args.out.write_text(json.dumps({"carriers": rows, "evidence": evidence}, indent=1, default=str))
    for row in rows:
        print(row)
    print("\n".join(table(evidence)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
