"""Issue 15's GPU check: every variant of the step on two shapes, predicted before measured.

Run by benchmarks/gpu_all.sh (or alone: `PYTHONPATH=. python3 benchmarks/bench_variants.py --out DIR`)
on an H200. Random-weight Qwen3-4B-Base at 1 x 4,096 and Qwen3-1.7B-Base at 4 x 4,096 tokens a step
(demo/checkpoints/*/config.json), rank-32 LoRA on all seven projections, through
benchmarks/harness_plain.py (no autocast, fp32 LoRA matmuls, for-each AdamW: the probes' step before
the harness contract was whole) so that every variant changes something. `carrier --variant` runs
each variant in its own process (the baseline in two). Writes variants_<shape>.json (the probe's JSON),
variants_<shape>.txt (its table) and variants_summary_<shapes>.json, and prints a verdict per criterion last.
--quick: a smoke run (0.6B at 1 x 1,024, three variants with compile, few steps). BENCH_SHAPES replaces the shapes
for a CPU dry run: "ckpt_dir:batch:seq_len,..." with tiny configs.
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
# compile last: the slowest
ALL = ("bf16-autocast", "bf16-adapters", "fused-adamw", "ce-chunk=4096", "grad-ckpt", "compile")
SHAPES = [("4b_1x4096", CKPT / "qwen3-4b-base", 1, 4096), ("1.7b_4x4096", CKPT / "qwen3-1.7b-base", 4, 4096)]
QUICK = [("0.6b_1x1024", CKPT / "qwen3-0.6b-base", 1, 1024)]


def shapes(quick: bool, only: list[str] | None = None) -> list[tuple[str, Path, int, int]]:
    if os.environ.get("BENCH_SHAPES"):
        out = []
        for item in os.environ["BENCH_SHAPES"].split(","):
            path, batch, seq = item.split(":")
            out.append((Path(path).name, Path(path), int(batch), int(seq)))
        return out
    chosen = QUICK if quick else SHAPES
    return [s for s in chosen if not only or s[0] in only]


def run_shape(name: str, checkpoint: Path, batch: int, seq: int, quick: bool, device: str, out: Path) -> dict:
    chosen = ("bf16-autocast", "grad-ckpt", "compile") if quick else ALL
    config = carrier.Config(
        checkpoint=(checkpoint,),
        weights="random",
        harness="benchmarks.harness_plain",
        lora_rank=32,
        lora_alpha=64.0,
        seq_len=seq,
        batch_size=batch,
        warmup_steps=2,
        steps=3 if quick else 5,
        max_steps=4 if quick else 20,
        variant=("baseline", *chosen),
        processes=2,
        num_arms=3,
        num_seeds=2,
        device=device,
    )
    begin = time.perf_counter()
    result = carrier.run(config)
    wall_s = time.perf_counter() - begin
    data = result.to_json_dict()
    data["wall_s"] = wall_s
    data["evidence"] = json.loads(result.artifacts.get("evidence.json", "{}"))
    (out / f"variants_{name}.json").write_text(json.dumps(data, indent=1))
    (out / f"variants_{name}.txt").write_text(render(result) + f"\n\nwall_s: {wall_s:.1f}\n")
    print(render(result), flush=True)
    print(f"[{name}: {wall_s:.1f} s]", flush=True)
    return data


def verdicts(results: dict[str, dict], quick: bool) -> list[tuple[str, bool, str]]:
    out = []
    for name, data in results.items():
        rows = data["tables"]["carriers"]
        failed = [f"{r['variant']}: {r['status']}" for r in rows if r["step_s"] is None]
        out.append(
            (
                f"{name}: every variant measured or failing with its reason",
                all(r["status"] for r in rows),
                f"{len(rows) - len(failed)} measured; failed: {failed}",
            )
        )
        gpu_bound = [r for r in rows if r["launch_bound"] is False]
        wide = [
            f"{r['variant']} {r['spread_pct']:.2f}%/{r['spread_across_pct'] or 0:.2f}%"
            for r in gpu_bound
            if r["spread_pct"] > 2 or (r["spread_across_pct"] or 0) > 2
        ]
        out.append(
            (
                f"{name}: GPU-bound rows' spread <= 2% (in process / across processes)",
                not wide,
                f"{len(gpu_bound)} GPU-bound rows; above: {wide}",
            )
        )
        whatif = {r["variant"]: r for r in data["tables"].get("whatif", [])}
        for v in ("bf16-autocast", "bf16-adapters"):
            r = whatif.get(v)
            ok = r is not None and r["error_pp"] is not None and abs(r["error_pp"]) <= 5
            out.append(
                (
                    f"{name}: {v} predicted within 5 pp of measured",
                    ok,
                    "missing"
                    if r is None
                    else f"predicted {r['predicted_saving_pct']}, measured "
                    f"{r['measured_saving_pct']}, error {r['error_pp']} pp; kernel time removed "
                    f"{r.get('kernel_saving_pct')}",
                )
            )
        if name.startswith("4b"):
            out.append(
                (f"{name}: the whole variant set within 10 minutes", data["wall_s"] <= 600, f"{data['wall_s']:.0f} s")
            )
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "out")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument(
        "--shape",
        action="append",
        choices=[s[0] for s in SHAPES],
        help="only this shape (repeatable; default: both): one call each fits the device's limit",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    # one line per finished process on stderr, every worker's whole result in workers.jsonl: a run cut
    # short by its time limit still leaves what it measured
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    logging.getLogger().handlers[0].setLevel(logging.INFO)
    jsonl = logging.FileHandler(args.out / "workers.jsonl")
    jsonl.setLevel(logging.DEBUG)
    jsonl.addFilter(lambda record: record.levelno == logging.DEBUG)
    jsonl.setFormatter(logging.Formatter("%(message)s"))
    workers = logging.getLogger("probes.step.variants.processes")
    workers.setLevel(logging.DEBUG)
    workers.addHandler(jsonl)
    results = {
        name: run_shape(name, ckpt, b, n, args.quick, args.device, args.out)
        for name, ckpt, b, n in shapes(args.quick, args.shape)
    }
    checks = verdicts(results, args.quick)
    summary = {"environment": environment(), "checks": [{"name": n, "ok": ok, "detail": d} for n, ok, d in checks]}
    (args.out / f"variants_summary_{'+'.join(results)}.json").write_text(json.dumps(summary, indent=1))
    for name, ok, detail in checks:
        print(f"[{'ok' if ok else 'FAIL'}] {name}: {detail}")
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
