"""After benchmarks/fp8_isolate.py found compiled float8-frozen's input gradient zero under `aot_eager` too (not
Inductor), and right once the backward's float8 GEMM is replaced by a dequantized matmul: which input of that GEMM
does the traced backward hand over differently? Each case is FrozenFloat8Linear's backward with one input remade
(contiguous copies, a scale cloned, W.T read from the module instead of saved), compiled with `aot_eager`.

    python3 benchmarks/fp8_isolate_gemm.py [--out FILE.json]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fp8_check import Block  # noqa: E402
from fp8_isolate import _Dequantized, _DequantizedLinear, _grad, _row, prepared  # noqa: E402

from probes.step.variants import fp8  # noqa: E402

CASES = ("as shipped", "a_q, a_scale contiguous copies", "scale_b cloned", "b_q cloned", "all four cloned",
         "tensor-wise scales")  # fmt: skip


class _Probe(_Dequantized):
    """FrozenFloat8Linear's forward (as _Dequantized's); the backward's float8 GEMM with one input remade."""

    case = CASES[0]

    @staticmethod
    def backward(ctx, grad_y):
        wt_q, wt_scale = ctx.saved_tensors
        a_q, a_scale = fp8.rowwise(grad_y.contiguous())
        case = _Probe.case
        if case in ("a_q, a_scale contiguous copies", "all four cloned"):
            a_q, a_scale = a_q.clone(memory_format=torch.contiguous_format), a_scale.clone()
        if case in ("scale_b cloned", "all four cloned"):
            wt_scale = wt_scale.clone()
        if case in ("b_q cloned", "all four cloned"):
            wt_q = wt_q.clone()
        if case == "tensor-wise scales":  # one scale each, W requantized from its row-wise copy
            g, w = grad_y.contiguous().float(), wt_q.float() * wt_scale.reshape(-1, 1)
            a_s, b_s = g.abs().amax() / fp8.E4M3_MAX, w.abs().amax() / fp8.E4M3_MAX
            a_q, b_q = (g / a_s).to(fp8.E4M3), (w / b_s).to(fp8.E4M3)
            out = torch._scaled_mm(a_q, b_q.t(), scale_a=a_s, scale_b=b_s, out_dtype=torch.bfloat16)
        else:
            out = torch._scaled_mm(a_q, wt_q.t(), scale_a=a_scale, scale_b=wt_scale, out_dtype=torch.bfloat16)
        return out.to(grad_y.dtype), None, None, None, None


class _ProbeLinear(_DequantizedLinear):
    function = _Probe


def main() -> None:
    args, device, lin, x, weight, ref = prepared(__doc__.splitlines()[0])
    rows = []
    for case in CASES:
        for backend in ("eager", "aot_eager"):
            torch._dynamo.reset()
            _Probe.case = case
            module = Block(_ProbeLinear(lin))
            try:
                built = module if backend == "eager" else torch.compile(module, backend=backend)
                rows.append({"backend": backend, **_row(case, _grad(built, x, weight, device, True), ref)})
            except Exception as exc:
                rows.append({"backend": backend, "case": case, "error": f"{type(exc).__name__}: {exc}"[:300]})
            print(json.dumps(rows[-1]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
