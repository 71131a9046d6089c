"""The lab's other carriers on one GPU: dense Qwen3-4B-Base against the hybrid Qwen3.5-0.8B (with and without
flash-linear-attention), and the mixture of experts Qwen3-30B-A3B-Base with LoRA on attention.

Run on an H200 from a plain checkout (PYTHONPATH=. , no install; parts 1-3 about 4 minutes, all about 8):
    PYTHONPATH=. python3 benchmarks/bench_carriers_gpu.py --out $OUT [--fla-path DIR --conv-path DIR|--conv-shim]
Random weights, real-size configs (demo/checkpoints), the carrier probe's reference step (bf16 autocast,
PEFT LoRA rank 32, fused AdamW), one sequence of 4,096 tokens a step, each measurement in its own fresh
process (probes/step/variants/processes.py). Parts, in order (the slow reference path last: on the H200 it took 197 s
of a first run's 350, profiling 26,000 element-wise launches a step):
0. `fla_check`: fla's chunk_gated_delta_rule and the causal conv against transformers' torch reference,
   forward and gradients, one sequence and three packed (benchmarks/fla_check.py). The H200 image's
   torch 2.11 pins Triton 3.6.0, where fla's gated backward is miscompiled on Hopper (fla #640) and fla
   0.5.1+ refuses to run: `--lift-fla-640` with a copy of fla 0.6.0 whose guard reads
   LABPROBE_LIFT_FLA_640 times the same kernels and this part says which gradients are then wrong.
1. `dense_vs_hybrid`: Qwen3-4B-Base and Qwen3.5-0.8B with flash-linear-attention on the path (`--fla-path`,
   appended to sys.path, which the worker processes inherit). causal-conv1d has no wheel on the registry
   (it compiles a CUDA extension: nvcc + torch headers; benchmarks/build_causal_conv1d.sh); `--conv-path`
   puts a folder holding the built package on the path, `--conv-shim` benchmarks/conv_shim (fla's Triton conv
   under the name causal_conv1d), else `causal_conv1d_fn` falls back to F.conv1d.
2. `packed_varlen`: the reduced Qwen3.5 on the GPU, each packed sequence against itself alone per layer
   (probes/mask/leak.py): position_ids only, + cu_seq_lens (fla's varlen path), + seq_idx (the conv's).
3. `moe`: Qwen3-30B-A3B-Base, LoRA on q/k/v/o only (benchmarks/harness_attention_lora.py: 61 GB of bf16
   weights fit; expert LoRA through target_parameters would materialise each layer's expert deltas).
4. `hybrid_no_fla`: Qwen3.5-0.8B with transformers' reference PyTorch kernels (fla and the shim taken
   off the path again): the carrier's `fast_kernels` check must fail and name what to install.
Each part's carrier rows, checks, summary and the top kernels of each baseline go to $OUT/carriers.json,
rewritten after every part (a part that fails is recorded with its error; the next still runs).
BENCH_QUICK=1 with BENCH_CHECKPOINTS=dense,hybrid,moe (config dirs) runs the same parts tiny on the CPU.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

from benchmarks.bench_goodput_gpu import environment  # noqa: E402  (one record of the versions)
from probes.carrier import probe as carrier  # noqa: E402
from probes.mask import leak as mask_leak  # noqa: E402
from probes.mask.config import Config as MaskConfig  # noqa: E402
from probes.step.masking.attention_calls import build_batch  # noqa: E402
from probes.step.train.checkpoint import load_text_config  # noqa: E402

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
        max_steps=2 if QUICK else 20,  # room to extend past a bump (10 left 5.7% spreads unextended)
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
    """Per layer, packed against alone on the GPU, with what the model is told about the boundaries:
    position_ids only; + cu_seq_lens_q/k and max_length_q/k (DataCollatorWithFlattening's
    return_flash_attn_kwargs: transformers hands cu_seq_lens_q to fla's chunk_gated_delta_rule as
    cu_seqlens, which resets the recurrent state); + seq_idx (its return_seq_idx: transformers 5.25
    derives nothing for the causal convolution from cu_seq_lens, only an explicit seq_idx reaches
    `causal_conv1d_fn`, and its torch fallback refuses it). Without seq_idx each sequence's first
    kernel-1 = 3 tokens see the previous sequence's last ones through the convolution."""
    text = load_text_config(checkpoint)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    batch = build_batch(MaskConfig(checkpoint=checkpoint, seq_len=512, padding="packed"), 256)
    out = {}
    with torch.device(device):
        batch.kwargs.update({k: v.to(device) for k, v in batch.kwargs.items()})
        # every tensor on the device: under torch.device(cuda) a new arange lands there, beside CPU counts
        counts = torch.unique_consecutive(batch.seq_id[0].to(device), return_counts=True)[1]
        cu = torch.nn.functional.pad(counts.cumsum(0), (1, 0)).to(dtype=torch.int32)
        seq_idx = torch.repeat_interleave(torch.arange(len(counts), dtype=torch.int32), counts)[None]
        longest = int(counts.max())  # what DataCollatorWithFlattening gives: the longest sequence, not the row
        given = {
            "position_ids_only": {},
            "cu_seq_lens": dict(cu_seq_lens_q=cu, cu_seq_lens_k=cu, max_length_q=longest, max_length_k=longest),
        }
        given["cu_seq_lens+seq_idx"] = {**given["cu_seq_lens"], "seq_idx": seq_idx}
        for name, extra in given.items():
            batch.kwargs.update(extra)
            try:
                leaks = mask_leak.layer_leaks(text, batch, attn_implementation="sdpa", use_cache=False)
                out[name] = {
                    "leak_rel": leaks,
                    "layers_leaking": [i for i, x in enumerate(leaks) if x > mask_leak.LEAK_REL],
                }
            except Exception as exc:  # noqa: BLE001 - without fla / causal_conv1d transformers refuses: the finding
                out[name] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return out


def fla_check() -> dict:
    """fla's kernels (and the conv) against transformers' torch reference, before anything is timed."""
    from benchmarks import fla_check as check
    from probes.step.measure import kernel_watch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    out = {"tolerance": check.TOLERANCE, "kernel_packages": kernel_watch.installed(), "imports": check.imports()}
    for name, part in (("chunk_gated_delta_rule", check.gated_delta_rule), ("causal_conv1d_fn", check.conv)):
        try:
            out[name] = (
                part(device)
                if not QUICK
                else part(device, T=64, H=2, D=16)
                if "delta" in name
                else part(device, T=64, dim=32)
            )
        except Exception as exc:  # noqa: BLE001 - recorded, the timing still runs (its rows say what ran)
            out[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    return out


def fla_also(folder: str, main_fla: str | None, time_it: bool) -> dict:
    """Another fla folder (e.g. .whl-fla/0.6.0-dsT, the #640 kernel rewritten to avoid the miscompiled
    transpose): its fla_check in a fresh process, and, with `time_it`, the hybrid timed with it in place of
    `main_fla`, only if the check found no wrong output or gradient (nothing else is worth timing)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = [folder, *(p for p in sys.path if p and p != main_fla)]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
        cmd = [sys.executable, str(ROOT / "benchmarks" / "fla_check.py"), "--out", tmp]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        found = Path(tmp) / "fla_check.json"
        if not found.exists():
            return {"check": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}
        out = {"check": json.loads(found.read_text())}
    part = out["check"]["parts"].get("chunk_gated_delta_rule", {})
    right = "error" not in part and not any(v.get("wrong") for v in part.values() if isinstance(v, dict))
    out["timed"] = bool(time_it and right)
    if out["timed"]:
        saved = list(sys.path)
        sys.path[:] = path  # the carrier's workers take sys.path as their PYTHONPATH
        try:
            out["hybrid"] = carrier_part([HYBRID])
        finally:
            sys.path[:] = saved
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "out")
    parser.add_argument("--fla-path", default=None, help="a folder holding flash-linear-attention (+ fla-core, einops)")
    parser.add_argument(
        "--conv-shim", action="store_true", help="with --fla-path: benchmarks/conv_shim as causal_conv1d"
    )
    parser.add_argument(
        "--conv-path", default=None, help="with --fla-path: a folder holding a built causal-conv1d (not the shim)"
    )
    parser.add_argument(
        "--lift-fla-640", action="store_true", help="LABPROBE_LIFT_FLA_640=1 (a copy of fla patched for it)"
    )
    parser.add_argument("--fla-also", default=None, help="a second fla folder: its fla_check, in a fresh process")
    parser.add_argument("--time-also", action="store_true", help="time the hybrid with --fla-also if it checks right")
    parser.add_argument("--skip", nargs="*", default=[], help="parts to leave out (e.g. hybrid_no_fla once measured)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.lift_fla_640:  # inherited by the worker processes; see benchmarks/fla_check.py for what it costs
        os.environ["LABPROBE_LIFT_FLA_640"] = "1"
    report: dict = {"environment": environment(), "args": vars(args) | {"out": str(args.out)}, "parts": {}}
    # the worker processes inherit sys.path when they start: fla is on it for the first parts, off for the last
    fla = [args.fla_path] if args.fla_path else []
    conv = args.conv_path or (str(ROOT / "benchmarks" / "conv_shim") if args.conv_shim else None)
    fla += [conv] if fla and conv else []
    parts = [
        ("fla_on_path", lambda: sys.path.extend(fla)),
        ("fla_check", fla_check),
        ("dense_vs_hybrid", lambda: carrier_part([DENSE, HYBRID])),
        ("packed_varlen", lambda: packed_varlen(HYBRID)),
        ("fla_also", lambda: fla_also(args.fla_also, args.fla_path, args.time_also) if args.fla_also else None),
        ("moe", lambda: carrier_part([MOE], harness="benchmarks.harness_attention_lora")),
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
