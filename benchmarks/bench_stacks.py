"""Issues 27 and 41's GPU check: `carrier --search` finds the fastest stack of step changes within the numerics
tolerance on a shape, each stack predicted before measured, with the numerics price of every one, what the
fastest stack outside the tolerance would buy and cost, and the settings of the winner.

Run by benchmarks/gpu_41.sh and gpu_41_hybrid.sh (or alone: `PYTHONPATH=. python3 benchmarks/bench_stacks.py
--shape 4b_1x4096 --out DIR`) on an H100/H200. Random weights from demo/checkpoints' real configs, rank-32 LoRA:
- `4b_1x4096`, `1.7b_4x4096`: Qwen3-4B-Base at 1 x 4,096 and Qwen3-1.7B-Base at 4 x 4,096 tokens a step, LoRA on
  all seven projections, through benchmarks/harness_plain.py (fp32 LoRA matmuls, for-each AdamW: the step the
  variants improve on);
- `hybrid_0.8b_1x4096`: Qwen3.5-0.8B (18 linear-attention layers of 24), the same harness; fast only with
  flash-linear-attention and causal-conv1d on the path (the carrier's `fast_kernels` check says which ran);
- `moe_30b_a3b_24l_1x4096`: Qwen3-30B-A3B-Base's widths and experts (128, top 8) with 24 of its 48 layers (the
  whole model's 61 GB of bf16 weights leave an H100 no room for a search), LoRA on attention only through
  benchmarks/harness_attention_lora.py (the reference step: bf16 autocast and fused AdamW already).
Candidates (--candidates): bf16-autocast, compile, fused-adamw and bf16-adapters by default (bf16-adapters is
outside the tolerance: it prices the fastest stack outside it); add liger, float8, cuda-graphs, micro-batch=N.
Writes, each as soon as made: stacks_<shape>.json (the probe's JSON), stacks_<shape>.txt (its tables, the
settings), workers.jsonl (every process's whole result, one line as each ends), then
stacks_summary_<shapes>.json, and prints a verdict per criterion last.
BENCH_SHAPES replaces the shapes for a CPU dry run: "ckpt_dir:batch:seq_len[:harness],..." with tiny configs.
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
PLAIN, ATTENTION = "benchmarks.harness_plain", "benchmarks.harness_attention_lora"
SHAPES = {
    "4b_1x4096": (CKPT / "qwen3-4b-base", 1, 4096, PLAIN),
    "1.7b_4x4096": (CKPT / "qwen3-1.7b-base", 4, 4096, PLAIN),
    "hybrid_0.8b_1x4096": (CKPT / "qwen3.5-0.8b", 1, 4096, PLAIN),
    "moe_30b_a3b_24l_1x4096": (CKPT / "qwen3-30b-a3b-base", 1, 4096, ATTENTION),
}
DEFAULT_SHAPES = ("4b_1x4096", "1.7b_4x4096")
CANDIDATES = ("bf16-autocast", "compile", "fused-adamw", "bf16-adapters")
MOE_LAYERS = 24
VERDICT = {True: "within", False: "OUTSIDE", None: "not measured"}


def shapes(only: list[str] | None, out: Path) -> list[tuple[str, Path, int, int, str]]:
    if os.environ.get("BENCH_SHAPES"):
        found = []
        for item in os.environ["BENCH_SHAPES"].split(","):
            path, batch, seq, *harness = item.split(":")
            found.append((Path(path).name, Path(path), int(batch), int(seq), harness[0] if harness else PLAIN))
        return found
    chosen = [(name, *SHAPES[name]) for name in (only or DEFAULT_SHAPES)]
    return [(n, fewer_layers(c, MOE_LAYERS, out) if "_24l_" in n else c, b, s, h) for n, c, b, s, h in chosen]


def fewer_layers(checkpoint: Path, layers: int, out: Path) -> Path:
    """A config folder holding `checkpoint`'s config.json with its first `layers` layers (the same widths and
    experts, so each layer's step is the real one's): under `out`/checkpoints."""
    config = json.loads((checkpoint / "config.json").read_text())
    config["num_hidden_layers"] = layers
    if isinstance(config.get("layer_types"), list):
        config["layer_types"] = config["layer_types"][:layers]
    folder = out / "checkpoints" / f"{checkpoint.name}-{layers}l"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def run_shape(name: str, shape: tuple[Path, int, int, str], args: argparse.Namespace) -> dict:
    checkpoint, batch, seq, harness = shape
    config = carrier.Config(
        checkpoint=(checkpoint,),
        weights="random",
        harness=harness,
        lora_rank=32,
        lora_alpha=64.0,
        seq_len=seq,
        batch_size=batch,
        warmup_steps=2,
        steps=args.steps,
        max_steps=args.max_steps,
        variant=("baseline", *args.candidates),
        processes=args.processes,
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
        out += _speed_verdicts(name, data) + _search_verdicts(name, data)
    return out


def _speed_verdicts(name: str, data: dict) -> list[tuple[str, bool, str]]:
    """The winner within the tolerance against x2.0 (and the moonshot x2.5), and the spread of GPU-bound rows."""
    rows = {r["variant"]: r for r in data["tables"]["carriers"]}
    base = rows["baseline"]
    numerics = {r["variant"]: r for r in data["tables"].get("numerics", [])}
    within = [r for r in rows.values() if r["step_s"] and (numerics.get(r["variant"]) or {}).get("within_tolerance")]
    fastest = min(within, key=lambda r: r["step_s"]) if within and base["step_s"] else None
    best = rows.get((data["summary"].get("search_best") or [""])[0])  # the winner: its settings are printed
    best = best if best and best["step_s"] and base["step_s"] else None
    speedup = base["step_s"] / best["step_s"] if best else 0.0
    how = "none"
    if best:
        how = f"{best['variant']} x{speedup:.3f} ({base['tok_per_s']:,.0f} -> {best['tok_per_s']:,.0f} tok/s)"
    if fastest and best and fastest is not best:  # a row within the tolerance the search did not adopt (noise)
        how += f"; fastest row within the tolerance: {fastest['variant']} x{base['step_s'] / fastest['step_s']:.3f}"
    out = [(f"{name}: the fastest stack within the numerics tolerance >= x2.0 the baseline's tok/s", speedup >= 2.0, how),
           (f"{name}: moonshot, within the tolerance >= x2.5", speedup >= 2.5, how)]  # fmt: skip
    gpu_bound = [r for r in rows.values() if r["launch_bound"] is False]
    wide = [f"{r['variant']} {r['spread_pct']:.2f}%/{r['spread_across_pct'] or 0:.2f}%" for r in gpu_bound
            if r["spread_pct"] > 2 or (r["spread_across_pct"] or 0) > 2]  # fmt: skip
    launch = [r["variant"] for r in rows.values() if r["launch_bound"]]
    out.append((f"{name}: GPU-bound rows' spread <= 2%", not wide,
                f"{len(gpu_bound)} GPU-bound rows; above: {wide}; launch-bound rows: {launch}"))  # fmt: skip
    return out


def _search_verdicts(name: str, data: dict) -> list[tuple[str, bool, str]]:
    """Predictions within 10%, the numerics table beside every row, the settings printed being the winner's."""
    rows = data["tables"]["carriers"]
    summary = data["summary"]
    stacked = [r for r in data["tables"].get("search", []) if r["round"] > 1 and r["error_pct"] is not None]
    off = [f"{r['stack']} {r['error_pct']:+.1f}%" for r in stacked if abs(r["error_pct"]) > 10]
    numerics = data["tables"].get("numerics", [])
    best = (summary.get("search_best") or ["?"])[0]
    settings = summary.get("settings", [])
    return [
        (f"{name}: stack predictions within 10% of the measured step", bool(stacked) and not off,
         f"{len(stacked)} stacks predicted; errors: " + ", ".join(f"{r['stack']} {r['error_pct']:+.1f}%" for r in stacked)),
        (f"{name}: the numerics table beside it", len(numerics) == len(rows),
         "; ".join(f"{r['variant']}: {VERDICT[r['within_tolerance']]}" for r in numerics)),
        (f"{name}: the settings printed are the winner within the tolerance's",
         bool(settings) and f"the search's best {best}" in settings[0] and "OUTSIDE" not in settings[0],
         f"{settings[0] if settings else 'none'} | {(summary.get('search_outside') or ['no outside line'])[0]}"),
    ]  # fmt: skip


def _logging(out: Path) -> None:
    """One line per finished process and each prediction on stderr, every worker's result in workers.jsonl:
    a run cut short by its time limit still leaves what it measured."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger().handlers[0].setLevel(logging.INFO)
    jsonl = logging.FileHandler(out / "workers.jsonl")
    jsonl.setLevel(logging.DEBUG)
    jsonl.addFilter(lambda record: record.levelno == logging.DEBUG)
    jsonl.setFormatter(logging.Formatter("%(message)s"))
    workers = logging.getLogger("probes.step.variants.processes")
    workers.setLevel(logging.DEBUG)
    workers.addHandler(jsonl)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "out")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--shape", action="append", choices=list(SHAPES), help="only this shape (repeatable)")
    parser.add_argument("--candidates", nargs="+", default=list(CANDIDATES))
    parser.add_argument("--processes", type=int, default=2, help="fresh processes of the baseline (its noise)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="--search-budget-s per shape")
    parser.add_argument("--numerics-steps", type=int, default=30)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--max-steps", type=int, default=12)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    _logging(args.out)
    results = {name: run_shape(name, (ckpt, b, n, h), args) for name, ckpt, b, n, h in shapes(args.shape, args.out)}
    checks = verdicts(results)
    summary = {"environment": environment(), "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}
    (args.out / f"stacks_summary_{'+'.join(results)}.json").write_text(json.dumps(summary, indent=1))
    for name, ok, detail in checks:
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
