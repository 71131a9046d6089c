"""Where compiled float8-frozen loses its input gradient on CUDA: one frozen projection (4,096 tokens, 2,560 -> 1,024)
in a block under bf16 autocast, its input gradient compared with eager FrozenFloat8Linear's, compiled in steps that
each rule one cause in or out:

- `aot_eager`: dynamo and AOTAutograd without Inductor. Zero here: the trace of the autograd.Function, not Inductor;
- `inductor, no autocast`: the input already bf16. Right here: autocast's part in the trace;
- `inductor, linear alone`: FrozenFloat8Linear compiled without the block's elementwise ops around it;
- `inductor, backward dequantized`: the same Function with a backward that dequantizes W and runs a plain matmul;
  right here, the backward's float8 GEMM (its casts or the op) is what Inductor gets wrong;
- `inductor, backward cast then dequantized`: grad_y cast to e4m3 row-wise as the real backward does, then
  dequantized and a plain matmul; right here and wrong above, the GEMM; wrong here, the cast.

    python3 benchmarks/fp8_isolate.py [--out FILE.json]      (CUDA; on a CPU it checks its own wiring)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_check import Block  # noqa: E402

from probes.step.variants import fp8  # noqa: E402


class _Dequantized(torch.autograd.Function):
    """FrozenFloat8Linear's forward; a backward that dequantizes W.T (optionally after casting grad_y to e4m3)."""

    cast_grad = False

    @staticmethod
    def forward(ctx, x, w_q, w_scale, wt_q, wt_scale):
        ctx.save_for_backward(wt_q, wt_scale)
        return fp8._gemm(x, w_q, w_scale, x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        wt_q, wt_scale = ctx.saved_tensors
        g = grad_y.float()
        if _Dequantized.cast_grad:
            g_q, g_scale = fp8.rowwise(grad_y)
            g = g_q.float() * g_scale
        w = wt_q.float() * wt_scale.reshape(-1, 1)  # (in x out)
        return (g @ w.t()).to(grad_y.dtype), None, None, None, None


class _DequantizedLinear(fp8.FrozenFloat8Linear):
    function = _Dequantized

    def forward(self, x):
        flat = x.reshape(-1, self.in_features).contiguous()
        y = self.function.apply(flat, self.weight, self.w_scale, self.wt_q, self.wt_scale)
        return y.reshape(*x.shape[:-1], self.out_features)


def _grad(module, x, weight, device: str, autocast: bool) -> torch.Tensor:
    grad = None
    for _ in range(3):
        x = x.detach().requires_grad_(True)
        with torch.autocast(device, dtype=torch.bfloat16, enabled=autocast):
            y = module(x)
        (y.float() * weight).sum().backward()
        grad = x.grad.detach().float()
    return grad


def _row(case: str, grad: torch.Tensor, ref: torch.Tensor) -> dict:
    a, b = grad.flatten(), ref.flatten()
    return {
        "case": case,
        "grad_cos": float(a @ b / (a.norm() * b.norm())) if a.norm() > 0 else None,
        "grad_zero_frac": float((grad == 0).float().mean()),
        "grad_nan": int(grad.isnan().sum()),
        "grad_norm_ratio": float(a.norm() / b.norm()),
    }


def setup(tokens: int) -> tuple[str, nn.Linear, torch.Tensor, torch.Tensor]:
    """The device, one frozen bf16 projection (2,560 -> 1,024), its input and the loss's weights, seeded."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.manual_seed(0)
    lin = nn.Linear(2560, 1024, bias=False, device=device, dtype=torch.bfloat16).requires_grad_(False)
    nn.init.normal_(lin.weight, std=0.02)
    x = torch.randn(tokens, 2560, device=device, dtype=torch.bfloat16)
    return device, lin, x, torch.randn(tokens, 1024, device=device)


def prepared(description: str) -> tuple[argparse.Namespace, str, nn.Linear, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Both diagnostics' command line (`--out`, `--tokens`), their seeded setup and eager float8-frozen's gradient,
    the reference every case is compared with."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--tokens", type=int, default=4096)
    args = parser.parse_args()
    device, lin, x, weight = setup(args.tokens)
    return args, device, lin, x, weight, _grad(Block(fp8.FrozenFloat8Linear(lin)), x, weight, device, True)


def main() -> None:
    args, device, lin, x, weight, ref = prepared(__doc__.splitlines()[0])
    cases = [
        ("eager, again", lambda: Block(fp8.FrozenFloat8Linear(lin)), True, False),
        ("aot_eager", lambda: torch.compile(Block(fp8.FrozenFloat8Linear(lin)), backend="aot_eager"), True, False),
        ("inductor", lambda: torch.compile(Block(fp8.FrozenFloat8Linear(lin))), True, False),
        ("inductor, no autocast", lambda: torch.compile(Block(fp8.FrozenFloat8Linear(lin))), False, False),
        ("inductor, linear alone", lambda: Block(torch.compile(fp8.FrozenFloat8Linear(lin))), True, False),
        ("inductor, backward dequantized", lambda: torch.compile(Block(_DequantizedLinear(lin))), True, False),
        ("inductor, backward cast then dequantized", lambda: torch.compile(Block(_DequantizedLinear(lin))), True, True),
    ]
    rows = [{"device": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": str(torch.__version__)}]
    for case, build, autocast, cast_grad in cases:
        torch._dynamo.reset()
        _Dequantized.cast_grad = cast_grad
        try:
            rows.append(_row(case, _grad(build(), x, weight, device, autocast), ref))
        except Exception as exc:  # one case failing says so; the rest still answer
            rows.append({"case": case, "error": f"{type(exc).__name__}: {exc}"[:300]})
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
