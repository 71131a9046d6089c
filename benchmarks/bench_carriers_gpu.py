"""The lab's other carriers on one GPU: dense Qwen3-4B-Base against the hybrid Qwen3.5-0.8B (with and without
flash-linear-attention), and the mixture of experts Qwen3-30B-A3B-Base with LoRA on attention.

Run on an H200 from a plain checkout (PYTHONPATH=. , no install; about 7 minutes):
    PYTHONPATH=. python3 benchmarks/bench_carriers_gpu.py --out $OUT [--fla-path DIR]
Random weights, real-size configs (demo/checkpoints), the carrier probe's reference step (bf16 autocast,
PEFT LoRA rank 32, fused AdamW), one sequence of 4,096 tokens a step, each measurement in its own fresh
process (probes/step/processes.py). Parts, in order (the slow reference path last: on the H200 it took 197 s
of a first run's 350, profiling 26,000 element-wise launches a step):
1. `dense_vs_hybrid`: Qwen3-4B-Base and Qwen3.5-0.8B with flash-linear-attention on the path (`--fla-path`,
   appended to sys.path, which the worker processes inherit). causal-conv1d is not installed: no wheel on
   the registry, it compiles a CUDA extension (nvcc + torch headers), so `causal_conv1d_fn` still falls back.
2. `moe`: Qwen3-30B-A3B-Base, LoRA on q/k/v/o only (benchmarks/harness_attention_lora.py: 61 GB of bf16
   weights fit; expert LoRA through target_parameters would materialise each layer's expert deltas).
3. `packed_varlen`: the reduced Qwen3.5 on the GPU, each packed sequence against itself alone per layer
   (probes/mask/leak.py), with position_ids only and with cu_seq_lens passed (the varlen path of fla).
4. `hybrid_no_fla`: Qwen3.5-0.8B with transformers' reference PyTorch kernels (flash-linear-attention taken
   off the path again): the carrier's `fast_kernels` check must fail and name what to install.
Each part's carrier rows, checks, summary and the top kernels of each baseline go to $OUT/carriers.json,
rewritten after every part (a part that fails is recorded with its error; the next still runs).
BENCH_QUICK=1 with BENCH_CHECKPOINTS=dense,hybrid,moe (config dirs) runs the same parts tiny on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

from benchmarks.bench_goodput_gpu import environment  # noqa: E402  (one record of the versions)
from probes.carrier import probe as carrier  # noqa: E402
from probes.mask import leak as mask_leak  # noqa: E402
from probes.mask.config import Config as MaskConfig  # noqa: E402
from probes.step.attention_calls import build_batch  # noqa: E402
from probes.step.checkpoint import load_text_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CKPT = ROOT / "demo" / "checkpoints"
QUICK = os.environ.get("BENCH_QUICK") == "1"
_given = os.environ.get("BENCH_CHECKPOINTS", "").split(",")
DENSE, HYBRID, MOE = (
    [Path(p) for p in _given]
    if len(_given) == 3
    else [CKPT / "qwen3-4b-base", CKPT / "qwen3.5-0.8b", CKPT / "qwen3-30b-a3b-base"]
)


def carrier_part(checkpoints: list[Path], harness: str = "probes.step.harness") -> dict:
    config = carrier.Config(
        checkpoint=tuple(checkpoints),
        weights="random",
        harness=harness,
        seq_len=64 if QUICK else 4096,
        warmup_steps=1 if QUICK else 3,
        steps=2 if QUICK else 10,
        max_steps=2 if QUICK else 10,
        processes=1,
        device="auto",
    )
    result = carrier.run(config)
    evidence = json.loads(result.artifacts.get("evidence.json", "{}"))
    return {
        "rows": [r.__dict__ for r in result.tables["carriers"]],
        "checks": [c.__dict__ for c in result.checks],
        "summary": {k: v for k, v in result.summary.items() if k != "advice"},
        "top_kernels": {name: (e["baseline"].get("kernel_table") or [])[:15] for name, e in evidence.items()},
        "num_steps": {name: (e["baseline"].get("timings") or {}).get("num_steps") for name, e in evidence.items()},
    }


def packed_varlen(checkpoint: Path) -> dict:
    """Per layer, packed against alone on the GPU: position_ids only, then cu_seq_lens for the varlen kernel."""
    text = load_text_config(checkpoint)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch = build_batch(MaskConfig(checkpoint=checkpoint, seq_len=512, padding="packed"), 256)
    out = {}
    with torch.device(device):
        batch.kwargs.update({k: v.to(device) for k, v in batch.kwargs.items()})
        out["position_ids_only"] = mask_leak.layer_leaks(text, batch, attn_implementation="sdpa", use_cache=False)
        starts = [0] + torch.unique_consecutive(batch.seq_id[0], return_counts=True)[1].cumsum(0).tolist()
        cu = torch.tensor(starts, dtype=torch.int32, device=device)
        batch.kwargs.update(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=512, max_length_k=512)
        try:
            out["cu_seq_lens"] = mask_leak.layer_leaks(text, batch, attn_implementation="sdpa", use_cache=False)
        except Exception as exc:  # noqa: BLE001 - without fla transformers refuses cu_seqlens: that is the finding
            out["cu_seq_lens"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "out")
    parser.add_argument("--fla-path", default=None, help="a folder holding flash-linear-attention (+ fla-core, einops)")
    parser.add_argument("--skip", nargs="*", default=[], help="parts to leave out (e.g. hybrid_no_fla once measured)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"environment": environment(), "parts": {}}
    # the worker processes inherit sys.path when they start: fla is on it for the first parts, off for the last
    fla = [args.fla_path] if args.fla_path else []
    parts = [
        ("fla_on_path", lambda: sys.path.extend(fla)),
        ("dense_vs_hybrid", lambda: carrier_part([DENSE, HYBRID])),
        ("moe", lambda: carrier_part([MOE], harness="benchmarks.harness_attention_lora")),
        ("packed_varlen", lambda: packed_varlen(HYBRID)),
        ("fla_off_path", lambda: [sys.path.remove(p) for p in fla] and None),
        ("hybrid_no_fla", lambda: carrier_part([HYBRID])),
    ]
    for name, run in parts:
        if name in args.skip:
            continue
        begin = time.perf_counter()
        try:
            report["parts"][name] = run() or {}
        except Exception:  # noqa: BLE001 - one part's failure is recorded, the next still runs
            report["parts"][name] = {"error": traceback.format_exc()[-2000:]}
        report["parts"][name]["wall_s"] = round(time.perf_counter() - begin, 1)
        print(f"[bench_carriers_gpu] {name}: {report['parts'][name]['wall_s']} s", flush=True)
        (args.out / "carriers.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
