"""Are the fast kernels of the hybrid right on this machine? flash-linear-attention's chunk_gated_delta_rule
and the causal convolution, against transformers' own torch reference, forward and gradients.

Why: fla's gated backward (`chunk_bwd_dqkwg`) is miscompiled by Triton >= 3.4.0 and < 3.7.1 on Hopper
(fla issue #640: a transposed MMA result feeds a dot; wrong dq/dk/dg, hence wrong gradients of the
gates and the betas; the forward is right). fla 0.5.1+ refuses to run there; older releases (0.4.x,
the same kernel) run silently wrong. torch 2.11 pins Triton 3.6.0, so the H200 image is in that range;
bench_carriers_gpu.py times fla there with the guard lifted (a copy of fla 0.6.0, LABPROBE_LIFT_FLA_640=1),
and this check says, with numbers, which outputs and gradients are then wrong: the timing stands (the same
kernels run), the gradients do not, until Triton >= 3.7.1.

The reference is the same transformers function called on CPU tensors (its torch path: transformers
dispatches to fla only for CUDA inputs), in fp32 from the same bf16 inputs. Error = ||fast - ref|| /
||ref||, within TOLERANCE or not. Packed (varlen): three sequences in one row with cu_seqlens, against
each sequence alone. Off a GPU (a CPU dry run) the "fast" side is transformers' per-token recurrent
reference, so the comparison machinery itself is checked against an independent algorithm.

    PYTHONPATH=.:FLA_DIR python3 benchmarks/fla_check.py --out DIR [--conv-shim]
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, no install

TOLERANCE = 0.02
"""Relative error a bf16 kernel may have against the fp32 reference (fla's own tests: about 0.005-0.01)."""


def _rel(fast: torch.Tensor, ref: torch.Tensor) -> float:
    fast, ref = fast.detach().float().cpu(), ref.detach().float().cpu()
    return float((fast - ref).norm() / ref.norm().clamp(min=1e-30))


def _inputs(T: int, H: int, D: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Gated DeltaNet inputs shaped like Qwen3.5-0.8B's linear layers (bf16, as under autocast)."""
    gen = torch.Generator().manual_seed(seed)
    out = {name: torch.randn(1, T, H, D, generator=gen) for name in ("query", "key", "value")}
    out["g"] = F.logsigmoid(torch.randn(1, T, H, generator=gen)) / 4  # decays in (0, 1), as -exp(A)*softplus
    out["beta"] = torch.rand(1, T, H, generator=gen).sigmoid()
    return {k: v.to(torch.bfloat16) for k, v in out.items()}


def _run(fn, inputs: dict, device: str, grad_out: torch.Tensor, **kw) -> dict[str, torch.Tensor]:
    """Output and the gradient of <output, grad_out> for every input."""
    xs = {k: v.to(device).float().requires_grad_() if device == "cpu" else v.to(device).requires_grad_()
          for k, v in inputs.items()}  # fmt: skip
    # query, key, value positional as transformers passes them: fla names them q, k, v, and transformers
    # drops keywords the implementation does not name
    out, _ = fn(xs["query"], xs["key"], xs["value"], g=xs["g"], beta=xs["beta"], use_qk_l2norm_in_kernel=True, **kw)
    (out.float() * grad_out.to(out.device)).sum().backward()
    return {"output": out, **{f"d_{k}": v.grad for k, v in xs.items()}}


def _compare(fast: dict, ref: dict) -> dict:
    errors = {k: float(f"{_rel(fast[k], ref[k]):.3g}") for k in ref}
    return {"rel_error": errors, "wrong": [k for k, e in errors.items() if not e <= TOLERANCE]}


def gated_delta_rule(device: str, T: int = 512, H: int = 16, D: int = 128) -> dict:
    """chunk_gated_delta_rule on `device` against the torch reference on the CPU: one sequence, then
    three packed into one row with cu_seqlens against each alone."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    fast_fn = m.torch_chunk_gated_delta_rule if device != "cpu" else m.torch_recurrent_gated_delta_rule
    inputs = _inputs(T, H, D)
    grad_out = torch.randn(1, T, H, D, generator=torch.Generator().manual_seed(1))
    ref = _run(m.torch_chunk_gated_delta_rule, inputs, "cpu", grad_out)
    out = {"device": device, "fast": "fla" if device != "cpu" else "torch_recurrent (CPU dry run)",
           "single": _compare(_run(fast_fn, inputs, device, grad_out), ref)}  # fmt: skip
    if device == "cpu":
        return out  # the torch references have no varlen path (transformers refuses cu_seqlens there)
    bounds = [0, T // 4, T // 4 + T // 2, T]  # three sequences of unequal lengths
    cu = torch.tensor(bounds, dtype=torch.int32, device=device)
    packed = _run(fast_fn, inputs, device, grad_out, cu_seqlens=cu)
    alone = [
        _run(m.torch_chunk_gated_delta_rule, {k: v[:, a:b] for k, v in inputs.items()}, "cpu", grad_out[:, a:b])
        for a, b in zip(bounds, bounds[1:])
    ]
    ref_packed = {k: torch.cat([a[k] for a in alone], dim=1) for k in ref}
    out["packed_cu_seqlens"] = _compare(packed, ref_packed)
    return out


def conv(device: str, T: int = 512, dim: int = 6144, width: int = 4) -> dict:
    """transformers' causal_conv1d_fn on `device` (the package it resolved: causal_conv1d, the shim, or
    its torch fallback) against the torch path on the CPU; with seq_idx, against each sequence alone."""
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    gen = torch.Generator().manual_seed(2)
    x = torch.randn(1, T, dim, generator=gen).to(torch.bfloat16).transpose(1, 2)  # (batch, dim, seq): a view
    weight, grad_out = torch.randn(dim, width, generator=gen) / width, torch.randn(1, dim, T, generator=gen)

    run = functools.partial(conv_grads, m.causal_conv1d_fn)
    ref = run(x, weight, "cpu", grad_out)
    out = {"single": _compare(run(x, weight, device, grad_out), ref)}
    bounds = [0, T // 4, T // 4 + T // 2, T]
    seq_idx = torch.cat(
        [torch.full((b - a,), i, dtype=torch.int32) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]
    )
    try:
        packed = run(x, weight, device, grad_out, seq_idx=seq_idx[None].to(device))
    except Exception as exc:  # noqa: BLE001 - the torch fallback refuses seq_idx: that is the finding
        out["packed_seq_idx"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
        return out
    alone = [run(x[:, :, a:b], weight, "cpu", grad_out[:, :, a:b]) for a, b in zip(bounds, bounds[1:])]
    ref_packed = {"output": torch.cat([a["output"] for a in alone], dim=2), "d_x": torch.cat([a["d_x"] for a in alone], dim=2),
                  "d_weight": sum(a["d_weight"] for a in alone)}  # fmt: skip
    out["packed_seq_idx"] = _compare(packed, ref_packed)
    return out


def conv_grads(fn, x, weight, device, grad_out, **kw) -> dict:
    """`fn`'s output and gradients on `device`, from fresh leaves: `weight` itself is never made to
    require grad (on the CPU, `.to("cpu")` returns the same tensor: a second run would add to the first
    run's gradient, and on the GPU its copy would be no leaf, its gradient None)."""
    xs = x.to(device).float() if device == "cpu" else x.to(device)
    xs, w = xs.detach().requires_grad_(), weight.to(device).detach().requires_grad_()
    y = fn(xs, w, None, activation="silu", **kw)
    (y.float() * grad_out.to(y.device)).sum().backward()
    return {"output": y, "d_x": xs.grad, "d_weight": w.grad}


def imports() -> dict[str, str]:
    """Where the modules transformers resolves its fast functions from come from (it falls back to torch
    silently when an import fails, and logs that only once per process)."""
    import importlib

    out = {}
    for name in ("fla.ops.gated_delta_rule", "causal_conv1d"):
        try:
            out[name] = str(Path(importlib.import_module(name).__file__).parent)
        except Exception as exc:  # noqa: BLE001 - the reason it would fall back
            out[name] = f"not importable: {type(exc).__name__}: {str(exc)[:200]}"
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--strict", action="store_true", help="exit 1 when an output or gradient is wrong or fails")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from probes.step.measure import kernel_watch

    report = {"tolerance": TOLERANCE, "kernel_packages": kernel_watch.installed(), "imports": imports(), "parts": {}}
    for name, part in (("chunk_gated_delta_rule", gated_delta_rule), ("causal_conv1d_fn", conv)):
        try:
            report["parts"][name] = part(args.device)
        except Exception as exc:  # noqa: BLE001 - recorded, the next part still runs
            report["parts"][name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"}
    (args.out / "fla_check.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report, indent=1))
    return 1 if args.strict and not all_right(report) else 0


def all_right(report: dict) -> bool:
    """Every part ran and every comparison within tolerance (a string is a refused packed call: not wrong)."""
    parts = report["parts"].values()
    checks = [c for part in parts for c in part.values() if isinstance(c, dict)]
    return not any("error" in part for part in parts) and not any(c.get("wrong") for c in checks)


if __name__ == "__main__":
    sys.exit(main())
