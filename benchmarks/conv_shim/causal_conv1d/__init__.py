"""A benchmark-only stand-in for the `causal_conv1d` package, backed by flash-linear-attention's Triton
causal convolution (`fla.modules.causal_conv1d`).

Why: transformers' Qwen3.5 Gated DeltaNet imports `causal_conv1d_fn` from a package named
`causal_conv1d` (Dao-AILab's CUDA extension). The registry has it only as source: installing it
compiles CUDA code with nvcc against the installed torch, which the H200 image (no nvcc wheel, no
registry) cannot do. fla ships the same operation as Triton kernels, with varlen support. Put this
folder on sys.path (benchmarks/bench_carriers_gpu.py --conv-shim) and transformers resolves
`causal_conv1d_fn` here instead of falling back to its torch `F.conv1d`. `kernel_watch.installed()`
still reports causal-conv1d as not installed (this folder has no distribution metadata): a row timed
with it says so in the benchmark's report, not in the store.

Same signature as causal_conv1d 1.x's `causal_conv1d_fn`: x is (batch, dim, seqlen), weight (dim, width),
`seq_idx` (batch, seqlen) int32 marks which packed sequence each token belongs to; the convolution
does not reach across a change of seq_idx (what keeps packed sequences apart). Initial and final states
(decoding) are not supported: training does not use them.
"""

from __future__ import annotations

import torch


def seq_idx_to_cu_seqlens(seq_idx: torch.Tensor) -> torch.Tensor:
    """(1, seqlen) sequence index per token -> cumulative lengths [0, n1, n1+n2, ...] (int32)."""
    if seq_idx.dim() != 2 or seq_idx.shape[0] != 1:
        raise ValueError(f"seq_idx must be (1, seqlen) for a packed row, got {tuple(seq_idx.shape)}")
    counts = torch.unique_consecutive(seq_idx[0], return_counts=True)[1]
    return torch.nn.functional.pad(counts.cumsum(0), (1, 0)).to(torch.int32)


def causal_conv1d_fn(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
    return_final_states: bool = False,
    final_states_out: torch.Tensor | None = None,
    activation: str | None = None,
) -> torch.Tensor:
    from fla.modules.causal_conv1d import causal_conv1d  # imported late: fla imports this package too

    if initial_states is not None or return_final_states or final_states_out is not None:
        raise NotImplementedError("benchmarks/conv_shim: initial/final conv states (decoding) are not supported")
    cu_seqlens = None if seq_idx is None else seq_idx_to_cu_seqlens(seq_idx)
    # fla's layout is (batch, seqlen, dim); the model's (batch, dim, seqlen) comes from a transpose, so
    # transposing back is a view of contiguous memory
    y, _ = causal_conv1d(
        x.transpose(1, 2).to(weight.dtype), weight=weight, bias=bias, activation=activation, cu_seqlens=cu_seqlens
    )
    return y.transpose(1, 2).to(x.dtype)
