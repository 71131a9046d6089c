"""GPU checks of issue 16 in one process: the CE memory model against the reference CE's measured peak,
and a replay of the demo corpus's real batch shapes on Qwen3-4B-Base against goodput's prediction.

Run on an H200 from a plain checkout (PYTHONPATH=. , no install):
    PYTHONPATH=. python3 benchmarks/bench_goodput_gpu.py --out $OUT
1. CE: for the 4B's vocabulary and hidden size at 8,192 tokens a step, each --ce-budgets-gib budget's
   recommended chunk (probes/padding/probe.py's model) and the unchunked CE, run through the reference
   cross_entropy (forward and backward) after one warm-up call; peak = torch.cuda.max_memory_allocated
   over the inputs. Verdict: the recommended chunk's peak within 10% of the model's and within budget.
2. Replay (probes/replay/probe.py): random-weight Qwen3-4B-Base, rank-32 LoRA, the demo corpus's lengths
   (benchmarks/data/demo_lengths_qwen3.csv, the Qwen3 tokenizer's), batch 6 (6 x 2,048 = 12,288 tokens
   at most: 4 x 4,096 does not fit the 4B without checkpointing), max length 2,048, `longest` and `bucket`
   at the 90%-gain size, 200 steps each, predicted from a fit measured first in the same process.
   Verdict: |error| <= 5% for both. Then goodput's projection of every strategy from that fit.
BENCH_CHECKPOINT / BENCH_QUICK=1 replace the model and shrink the run for a dry run on the CPU.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

from probes.corpus import batching  # noqa: E402
from probes.goodput import probe as goodput  # noqa: E402
from probes.padding import probe as padding  # noqa: E402
from probes.profile.contract import step_model  # noqa: E402  (a replay's fit tables are a profile's)
from probes.replay import probe as replay  # noqa: E402
from probes.step.harness import cross_entropy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CHECKPOINT = Path(os.environ.get("BENCH_CHECKPOINT", ROOT / "demo" / "checkpoints" / "qwen3-4b-base"))
LENGTHS = ROOT / "benchmarks" / "data" / "demo_lengths_qwen3.csv"
QUICK = os.environ.get("BENCH_QUICK") == "1"
FIT_LENS = (128, 256, 384, 512, 768, 1024, 1536, 2048)


def environment() -> dict:
    import peft
    import transformers

    cuda = torch.cuda.is_available()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "gpu": torch.cuda.get_device_name(0) if cuda else "none",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "triton": _version_of("triton"),  # issue 26's call may put another Triton first on the path
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
    }


def _version_of(module: str) -> str:
    try:
        return importlib.import_module(module).__version__
    except ImportError:
        return "not installed"


def ce_peak(tokens: int, vocab: int, hidden: int, chunk: int, device: torch.device) -> int:
    """The reference CE's peak over its inputs, forward and backward, after one warm-up call."""
    generator = torch.Generator(device=device).manual_seed(0)
    h = torch.randn(tokens, hidden, device=device, dtype=torch.bfloat16, generator=generator, requires_grad=True)
    w = torch.randn(vocab, hidden, device=device, dtype=torch.bfloat16, generator=generator)
    y = torch.randint(0, vocab, (tokens,), device=device, generator=generator)
    cross_entropy(h, w, y, chunk).backward()
    h.grad = None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    cross_entropy(h, w, y, chunk).backward()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - before


def ce_check(budgets_gib: list[float], tokens: int, device: torch.device) -> dict:
    config = json.loads((CHECKPOINT / "config.json").read_text())
    vocab, hidden = config["vocab_size"], config["hidden_size"]
    out = {"tokens": tokens, "vocab_size": vocab, "hidden_size": hidden, "budgets": []}
    for budget in budgets_gib:
        rows = padding.ce_rows(tokens, vocab, budget, (), hidden)
        chunk = padding.recommended_chunk(rows)
        model = next(r.peak_bytes for r in rows if r.chunk_tokens == chunk)
        measured = ce_peak(tokens, vocab, hidden, chunk, device)
        out["budgets"].append(
            {
                "budget_gib": budget,
                "chunk_tokens": chunk,
                "model_peak_bytes": model,
                "measured_peak_bytes": measured,
                "error_pct": 100 * (model - measured) / measured,
                "fits": measured <= budget * 2**30,
            }
        )
    full_model = padding.ce_peak_bytes(tokens, tokens, vocab, hidden)
    full = ce_peak(tokens, vocab, hidden, 0, device)
    out["unchunked"] = {
        "model_peak_bytes": full_model,
        "measured_peak_bytes": full,
        "bytes_per_logit": full / (tokens * vocab),
        "error_pct": 100 * (full_model - full) / full,
    }
    out["ok"] = all(abs(b["error_pct"]) <= 10 and b["fits"] for b in out["budgets"])
    return out


def replay_config() -> replay.Config:
    return replay.Config(
        checkpoint=CHECKPOINT,
        lengths=LENGTHS,
        weights="random",
        lora_rank=32,
        lora_alpha=64.0,
        batch_size=6,
        max_length=2048,
        strategies=("longest", "bucket"),
        num_steps=20 if QUICK else 200,
        warmup_steps=3,
        fit_lens=FIT_LENS,
        fit_steps=2 if QUICK else 5,
    )


def replay_check() -> tuple[dict, replay.ProbeResult]:
    begin = time.perf_counter()
    result = replay.run(replay_config())
    return {"wall_s": time.perf_counter() - begin, "ok": result.ok}, result


def projection(result_json: dict) -> list[dict]:
    """goodput of every strategy on the demo lengths from the fit the replay measured, for the ruling's
    budget (23.4M real tokens a job, 3 arms x 2 seeds)."""
    model = step_model(result_json, source="replay fit")
    lengths = np.loadtxt(LENGTHS, delimiter=",", skiprows=1, usecols=0, dtype=np.int64)
    size = batching.bucket_size_90pct(lengths, batch_size=6, max_length=2048)
    budget = goodput.Budget(23_400_000, 3, 2)
    return [
        dataclasses.asdict(
            goodput.price(
                batching.make(s, lengths, batch_size=6, max_length=2048, bucket_size=size),
                model,
                budget,
                size if s == "bucket" else None,
            )
        )
        for s in batching.STRATEGIES
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ce-budgets-gib", type=float, nargs="+", default=[2.0, 4.0, 8.0])
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_goodput_env.json").write_text(json.dumps(environment(), indent=1))
    cuda = torch.cuda.is_available()
    ce = ce_check(args.ce_budgets_gib, 8192, torch.device("cuda")) if cuda else {"ok": False, "skipped": "no CUDA"}
    (args.out / "gpu_ce_memory.json").write_text(json.dumps(ce, indent=1))
    print(json.dumps(ce, indent=1), flush=True)
    if cuda:
        torch.cuda.empty_cache()
    verdict, result = replay_check()
    data = result.to_json_dict()
    (args.out / "gpu_replay.json").write_text(json.dumps(data, indent=1))
    (args.out / "gpu_replay_timings.json").write_text(result.artifacts.get("timings.json", "{}"))
    for name in ("scaling", "fit", "replay"):
        for row in data["tables"].get(name, []):
            print(name, json.dumps(row), flush=True)
    proj = projection(data) if "fit" in data["tables"] and data["tables"]["fit"] else []
    for row in proj:
        print("goodput", json.dumps(row))
    summary = {"ce_ok": ce["ok"], "replay": verdict, "checks": data["checks"], "projection": proj}
    (args.out / "gpu_goodput_summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps({"ce_ok": ce["ok"], "replay_ok": verdict["ok"], "checks": data["checks"]}, indent=1))
    return 0 if ce["ok"] and verdict["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
