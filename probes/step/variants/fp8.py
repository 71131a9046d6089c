"""`float8-frozen`: the frozen base projections under LoRA in float8, quantized once, with no weight-gradient GEMM.

A LoRA step never updates a base projection's weight, so its float8 copies can be made once (static scales) and
its backward needs only the input's gradient. torchao's `Float8Linear` (the `float8` variant) is built for
pretraining: it casts the weight again every step and runs the weight-gradient GEMM of a frozen weight too, then
drops it, so of its three float8 GEMMs one is waste. Here each frozen weight W (out x in) is held twice in e4m3:

- W with one scale per output row: the forward's `x @ W.T`, x cast per call with one scale per token row;
- W.T with one scale per input column: the backward's `grad_y @ W`, grad_y cast per call with one scale per row.

Both GEMMs are `torch._scaled_mm` with row-wise scales (bf16 out), two float8 GEMMs where bf16 ran two bf16 ones.
The bf16 weight itself is freed (its module keeps the e4m3 copy as `weight`, so shapes still read), so the base
takes 2 bytes a parameter as before. e4m3 keeps 3 mantissa bits: each product is rounded to ~6%, which is why
the search prices it against the numerics tolerance like any other change. Eager, the casts cost more than the
GEMMs save (x0.82 on Qwen3-4B, H100). Compiled, they would fuse into their neighbours, but on CUDA the compiled
backward loses the input gradient: zero where eager's is within e4m3 rounding, whether Inductor lowers `_scaled_mm`
itself or calls `scaled_mm_rowwise` as an opaque op, and with `aot_eager` too, so it is the traced backward, not
Inductor's code; the same backward with the GEMM done on dequantized W is right, its e4m3 cast of grad_y too (H100,
torch 2.11, benchmarks/fp8_check.py and fp8_isolate.py). So a compiled float8-frozen is `not applicable` on CUDA
(probes.step.variants.libvariants). Runs on a CPU too (torch's own
`_scaled_mm`; compiled equals eager there), slowly.
"""

from __future__ import annotations

import torch
from torch import nn

E4M3 = torch.float8_e4m3fn
E4M3_MAX = torch.finfo(E4M3).max
ROWS = 16
"""`torch._scaled_mm` on CUDA takes row counts that are multiples of 16: a GEMM's rows are padded up to them."""


def rowwise(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """t (rows x k) as e4m3 with one fp32 scale per row, t ~= q * scale; an all-zero row keeps scale 1."""
    amax = t.abs().amax(dim=-1, keepdim=True).float()
    scale = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax))
    return (t.float() / scale).clamp(-E4M3_MAX, E4M3_MAX).to(E4M3), scale


@torch.library.custom_op("labprobe::scaled_mm_rowwise", mutates_args=())
def scaled_mm_rowwise(
    a_q: torch.Tensor, b_q: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor
) -> torch.Tensor:
    """a_q (m x k) @ b_q.T (b_q: n x k), e4m3 with row-wise scales (m x 1, 1 x n), bf16 out: `torch._scaled_mm`
    behind an op torch.compile does not look into, so a compiled step would run the kernel eager runs with the
    casts around it fused. On an H100 that did not bring the compiled backward's input gradient back (zero, as
    with Inductor's own lowering): compiled float8-frozen is refused on CUDA until it does."""
    return torch._scaled_mm(a_q, b_q.t(), scale_a=a_scale, scale_b=b_scale, out_dtype=torch.bfloat16)


@scaled_mm_rowwise.register_fake
def _(a_q: torch.Tensor, b_q: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor) -> torch.Tensor:
    return a_q.new_empty((a_q.shape[0], b_q.shape[0]), dtype=torch.bfloat16)


def _gemm(a: torch.Tensor, b_q: torch.Tensor, b_scale: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """a (m x k, high precision) @ b.T where b (n x k) is held as e4m3 rows `b_q` with scales `b_scale` (1 x n,
    contiguous: the layout `_scaled_mm` reads a row-wise scale of its second operand in)."""
    m = a.shape[0]
    pad = -m % ROWS
    if pad:
        a = torch.nn.functional.pad(a, (0, 0, 0, pad))
    a_q, a_scale = rowwise(a)
    return scaled_mm_rowwise(a_q, b_q, a_scale, b_scale)[:m].to(out_dtype)


class _FrozenMatmul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w_q, w_scale, wt_q, wt_scale):
        ctx.save_for_backward(wt_q, wt_scale)
        return _gemm(x, w_q, w_scale, x.dtype)

    @staticmethod
    def backward(ctx, grad_y):
        wt_q, wt_scale = ctx.saved_tensors
        # grad_x = grad_y @ W: b is W.T (in x out) as rows; the weight's own gradient is never computed
        return _gemm(grad_y.contiguous(), wt_q, wt_scale, grad_y.dtype), None, None, None, None


class FrozenFloat8Linear(nn.Module):
    """A frozen nn.Linear whose forward and input-gradient GEMMs run in e4m3 from copies made once."""

    def __init__(self, linear: nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        w = linear.weight.detach()
        w_q, w_scale = rowwise(w)
        wt_q, wt_scale = rowwise(w.t().contiguous())
        self.weight = nn.Parameter(w_q, requires_grad=False)  # shape and device read as before; 1 byte a weight
        self.register_buffer("w_scale", w_scale.reshape(1, -1).contiguous())
        self.register_buffer("wt_q", wt_q)
        self.register_buffer("wt_scale", wt_scale.reshape(1, -1).contiguous())
        self.bias = None if linear.bias is None else nn.Parameter(linear.bias.detach(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.in_features).contiguous()
        y = _FrozenMatmul.apply(flat, self.weight, self.w_scale, self.wt_q, self.wt_scale)
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias.to(y.dtype)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, e4m3 row-wise, frozen"


def convert(model: nn.Module, targets: set[str]) -> int:
    """Each named frozen nn.Linear replaced by its FrozenFloat8Linear, in place; how many."""
    for name in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, FrozenFloat8Linear(getattr(parent, child)))
    return len(targets)
