"""float8-frozen checked a second way on the GPU: one frozen projection of Qwen3-4B's widths in bf16 (the reference),
labprobe's FrozenFloat8Linear eager and compiled (alone, and in a block under bf16 autocast as the search compiles
it), and torchao's Float8Linear: each one's output and input-gradient cosine against the reference, and its
forward+backward time. An e4m3 GEMM's cosine to bf16 is ~0.999 for one projection; compiled must equal eager.

    python3 benchmarks/fp8_check.py [--out FILE.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probes.step.variants import fp8  # noqa: E402

SHAPES = ((4096, 2560, 9728), (4096, 9728, 2560), (4096, 2560, 1024))
"""(tokens, in, out): the MLP's up, its down, a k/v projection."""


class Block(nn.Module):
    """A projection between two elementwise ops, as a decoder layer's compiled region holds it."""

    def __init__(self, proj: nn.Module):
        super().__init__()
        self.proj = proj

    def forward(self, x):
        return torch.nn.functional.silu(self.proj(x * 1.5)) * 0.5


def _cos(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float().flatten(), b.detach().float().flatten()
    return float(a @ b / (a.norm() * b.norm()))


def _run(module, x, weight, autocast: bool) -> tuple[torch.Tensor, torch.Tensor, float]:
    x = x.detach().requires_grad_(True)
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
            y = module(x)
        (y.float() * weight).sum().backward()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
        out, grad, x.grad = y.detach(), x.grad.detach(), None
    return out, grad, 1e3 * sorted(times[2:])[1]


def check(tokens: int, d_in: int, d_out: int) -> list[dict]:
    torch.manual_seed(0)
    lin = nn.Linear(d_in, d_out, bias=False, device="cuda", dtype=torch.bfloat16).requires_grad_(False)
    nn.init.normal_(lin.weight, std=0.02)
    x = torch.randn(tokens, d_in, device="cuda", dtype=torch.bfloat16)
    weight = torch.randn(tokens, d_out, device="cuda")
    rows = []
    for autocast in (True,):  # as the search compiles its stacks: under bf16 autocast
        ref = _run(Block(lin), x, weight, autocast)
        cases = {"bf16": Block(lin), "float8-frozen eager": Block(fp8.FrozenFloat8Linear(lin))}
        torch._dynamo.reset()
        cases["float8-frozen compiled"] = torch.compile(Block(fp8.FrozenFloat8Linear(lin)))
        cases["float8-frozen compiled, Inductor's _scaled_mm"] = torch.compile(Block(fp8.FrozenFloat8Linear(lin)))
        try:
            from torchao.float8 import convert_to_float8_training

            ao = Block(nn.Linear(d_in, d_out, bias=False, device="cuda", dtype=torch.bfloat16))
            ao.proj.weight.data.copy_(lin.weight)
            ao.proj.weight.requires_grad_(False)
            convert_to_float8_training(ao)
            cases["torchao Float8Linear compiled"] = torch.compile(ao)
        except Exception as e:  # torchao absent or refusing: say so, the rest still answers
            rows.append({"shape": [tokens, d_in, d_out], "case": "torchao", "error": repr(e)[:200]})
        for name, module in cases.items():
            opaque = fp8.scaled_mm_rowwise
            if "Inductor's" in name:  # the GEMM as a plain `_scaled_mm` call Inductor lowers itself (the old path)
                fp8.scaled_mm_rowwise = lambda a_q, b_q, a_s, b_s: torch._scaled_mm(
                    a_q, b_q.t(), scale_a=a_s, scale_b=b_s, out_dtype=torch.bfloat16
                )
            try:
                out, grad, ms = _run(module, x, weight, autocast)
            finally:
                fp8.scaled_mm_rowwise = opaque
            rows.append({"shape": [tokens, d_in, d_out], "autocast": autocast, "case": name,
                         "out_cos": _cos(out, ref[0]), "grad_cos": _cos(grad, ref[1]), "fwd_bwd_ms": ms,
                         "grad_nan": int(grad.isnan().sum()), "grad_zero_frac": float((grad == 0).float().mean()),
                         "grad_norm_ratio": float(grad.float().norm() / ref[1].float().norm())})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    rows = [r for shape in SHAPES for r in check(*shape)]
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
