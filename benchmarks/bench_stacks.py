"""Issue 27's GPU check: `carrier --search` finds the fastest stack of step changes on two shapes, each stack
predicted before measured, with the numerics price of every one and the settings of the fastest.

Run by benchmarks/gpu_all.sh (or alone: `PYTHONPATH=. python3 benchmarks/bench_stacks.py --shape 4b_1x4096
--out DIR`, one shape per device call) on an H200. Random-weight Qwen3-4B-Base at 1 x 4,096 and
Qwen3-1.7B-Base at 4 x 4,096 tokens a step, rank-32 LoRA on all seven projections, through
benchmarks/harness_plain.py (fp32 LoRA matmuls, for-each AdamW: the step the variants improve on).
Candidates (--candidates): bf16-adapters, fused-adamw, compile by default (bf16-autocast cannot stack
with bf16-adapters and was slower alone; liger breaks compiled graphs: add them to measure it). Writes
stacks_<shape>.json (the probe's JSON), stacks_<shape>.txt (its tables, the settings), workers.jsonl
(every process's whole result) and stacks_summary_<shapes>.json, and prints a verdict per criterion last.
BENCH_SHAPES replaces the shapes for a CPU dry run: "ckpt_dir:batch:seq_len,..." with tiny configs.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

from benchmarks.bench_gpu import environment
from probes.carrier import probe as carrier
from runner.cli.probe import render

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "demo" / "checkpoints"
SHAPES = {"4b_1x4096": (CKPT / "qwen3-4b-base", 1, 4096), "1.7b_4x4096": (CKPT / "qwen3-1.7b-base", 4, 4096)}
CANDIDATES = ("bf16-adapters", "fused-adamw", "compile")


def shapes(only: list[str] | None) -> list[tuple[str, Path, int, int]]:
    if os.environ.get("BENCH_SHAPES"):
        out = []
        for item in os.environ["BENCH_SHAPES"].split(","):
            path, batch, seq = item.split(":")
            out.append((Path(path).name, Path(path), int(batch), int(seq)))
        return out
    return [(name, *SHAPES[name]) for name in (only or SHAPES)]


def run_shape(name: str, shape: tuple[Path, int, int], args: argparse.Namespace) -> dict:
    checkpoint, batch, seq = shape
    config = carrier.Config(
        checkpoint=(checkpoint,),
        weights="random",
        harness="benchmarks.harness_plain",
        lora_rank=32,
        lora_alpha=64.0,
        seq_len=seq,
        batch_size=batch,
        warmup_steps=2,
        steps=args.steps,
        max_steps=args.max_steps,
        variant=("baseline", *args.candidates),
        processes=2,
        search=True,
        search_budget_s=args.budget_s,
        numerics_steps=args.numerics_steps,
        device=args.device,
    )
    begin = time.perf_counter()
    result = carrier.run(config)
    wall_s = time.perf_counter() - begin
    data = result.to_json_dict()
    data["wall_s"] = wall_s
    data["evidence"] = json.loads(result.artifacts.get("evidence.json", "{}"))
    text = render(result) + f"\n\nwall_s: {wall_s:.1f}\n"
    (args.out / f"stacks_{name}.json").write_text(json.dumps(data, indent=1))
    (args.out / f"stacks_{name}.txt").write_text(text)
    print(text, flush=True)
    return data


def verdicts(results: dict[str, dict]) -> list[tuple[str, bool, str]]:
    out = []
    for name, data in results.items():
        rows = {r["variant"]: r for r in data["tables"]["carriers"]}
        base = rows["baseline"]
        best = min((r for r in rows.values() if r["step_s"]), key=lambda r: r["step_s"])
        speedup = base["step_s"] / best["step_s"]
        out.append((f"{name}: the search's best stack >= x2.0 the baseline's tok/s", speedup >= 2.0,
                    f"{best['variant']} x{speedup:.3f} ({base['tok_per_s']:,.0f} -> {best['tok_per_s']:,.0f} tok/s)"))  # fmt: skip
        gpu_bound = [r for r in rows.values() if r["launch_bound"] is False]
        wide = [f"{r['variant']} {r['spread_pct']:.2f}%/{r['spread_across_pct'] or 0:.2f}%" for r in gpu_bound
                if r["spread_pct"] > 2 or (r["spread_across_pct"] or 0) > 2]  # fmt: skip
        launch = [r["variant"] for r in rows.values() if r["launch_bound"]]
        out.append((f"{name}: GPU-bound rows' spread <= 2%", not wide,
                    f"{len(gpu_bound)} GPU-bound rows; above: {wide}; launch-bound rows: {launch}"))  # fmt: skip
        stacked = [r for r in data["tables"].get("search", []) if r["round"] > 1 and r["error_pct"] is not None]
        off = [f"{r['stack']} {r['error_pct']:+.1f}%" for r in stacked if abs(r["error_pct"]) > 10]
        out.append((f"{name}: stack predictions within 10% of the measured step", bool(stacked) and not off,
                    f"{len(stacked)} stacks predicted; errors: "
                    + ", ".join(f"{r['stack']} {r['error_pct']:+.1f}%" for r in stacked)))  # fmt: skip
        numerics = data["tables"].get("numerics", [])
        out.append((f"{name}: the numerics table beside it", len(numerics) == len(rows),
                    "; ".join(f"{r['variant']}: {'within' if r['within_tolerance'] else 'OUTSIDE'}" for r in numerics)))  # fmt: skip
        out.append((f"{name}: the settings printed", bool(data["summary"].get("settings")),
                    " / ".join(data["summary"].get("settings", [])[:1])))  # fmt: skip
    return out


def _logging(out: Path) -> None:
    """One line per finished process and each prediction on stderr, every worker's result in workers.jsonl:
    a run cut short by its time limit still leaves what it measured."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger().handlers[0].setLevel(logging.INFO)
    jsonl = logging.FileHandler(out / "workers.jsonl")
    jsonl.setLevel(logging.DEBUG)
    jsonl.addFilter(lambda record: record.levelno == logging.DEBUG)
    jsonl.setFormatter(logging.Formatter("%(message)s"))
    workers = logging.getLogger("probes.step.processes")
    workers.setLevel(logging.DEBUG)
    workers.addHandler(jsonl)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "out")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="only this shape (repeatable)")
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--budget-s", type=float, default=480.0, help="--search-budget-s per shape")
    parser.add_argument("--numerics-steps", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=12)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _logging(args.out)
    results = {name: run_shape(name, (ckpt, b, n), args) for name, ckpt, b, n in shapes(args.shape)}
    checks = verdicts(results)
    summary = {"environment": environment(), "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}
    (args.out / f"stacks_summary_{'+'.join(results)}.json").write_text(json.dumps(summary, indent=1))
    for name, ok, detail in checks:
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
