"""FLOPs of one LoRA training step over a frozen base, and the peak they are divided by for MFU.

For T = batch x seq_len tokens, a step costs

    4 * T * N_base  +  6 * T * N_lora  +  sum over layers of that layer's own token-mixing cost

- N_base: the frozen matmul weights one token goes through (probes.step.params): every linear layer,
  lm_head included (it runs even when tied to the embedding), the fused experts (3-D parameters,
  not nn.Linear) at top_k / num_experts of themselves, a router's weight; embeddings and norms do
  no matmul. Frozen: the forward costs 2*T*N and the backward only the activation gradient,
  another 2*T*N (no weight gradient).
- N_lora: LoRA A and B weights (adapters on experts at top_k / num_experts), trained: forward
  2*T*N, backward activation + weight grads 4*T*N.
- softmax attention (full and sliding layers), each layer at its own heads and head_dim (Gemma-4:
  512 on full layers, 256 on sliding ones): 12 * heads * head_dim per (query, key) pair seen
  (forward 4*h*d: scores and values; backward twice that). A causal layer sees L^2/2 pairs per
  sequence; a sliding layer (window w) min(position+1, w) keys per query: w*L - w^2/2 pairs when L > w.
- linear attention (Gated DeltaNet, Qwen3.5 / Qwen3-Next `linear_attention` layers), per token and
  value head with key/value head dims dk, dv and the kernels' chunk C = 64: forward
  6*dk*dv (read the d_k x d_v state, the delta correction, the rank-1 update) + C*(dk+dv) (the
  causal attention inside a chunk, C/2 keys on average), backward twice that: 3 * (...) in all; plus
  the causal depthwise convolution of kernel K over conv_dim channels, frozen: 4*K*conv_dim per token.
  Linear in L: at 32k tokens a hybrid's 48 linear layers cost less than one full layer.

Not counted: element-wise work, norms, softmax, routing's top-k, the optimizer, and PEFT's merge of
expert adapters (`target_parameters` builds the full delta weight of every expert each forward:
2*r*experts*in*out per wrapped parameter, per step not per token). MFU is named by its peak: the
measured one (a large bf16 matmul on the device, `measure_peak_flops`: about 790-800 TFLOP/s on an
H200 on random data, docs/measurement.md) or the datasheet's dense bf16 rate (`datasheet_peak_flops`,
the table in probes.step.peaks: 989 TFLOP/s for the H100/H200 SXM), the conventional MFU denominator,
so the two differ by about 1.23x there.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from probes.step import layer_types, params, peaks

LINEAR_CHUNK = 64
"""Chunk length of the gated delta rule kernels (fla's chunk_gated_delta_rule and transformers' reference)."""


@dataclasses.dataclass(frozen=True)
class Shape:
    num_base_linear: int
    num_lora: int
    num_layers: int
    num_heads: int
    head_dim: int
    windows: tuple[int | None, ...] = ()
    """Per layer: the sliding window, or None for full causal attention (empty: all full)."""
    layers: tuple[layer_types.LayerSpec, ...] = ()
    """Per layer, its type and sizes (probes.step.layer_types); when given, each layer is charged its own
    cost and num_heads/head_dim/windows are not used."""


def datasheet_peak_flops(device_name: str) -> float | None:
    """The datasheet's dense bf16 peak for a device name, FLOP/s; None for a card probes.step.peaks lacks."""
    return peaks.datasheet_peak_flops(device_name)


def _windows(config) -> tuple[int | None, ...]:
    types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    return tuple(window if t == "sliding_attention" and window else None for t in types)


def model_shape(model: nn.Module) -> Shape:
    counts = params.count(model)
    config = params.text_config(model)
    specs = tuple(layer_types.layer_specs(config))
    first = next((s for s in specs if s.kind == "softmax"), specs[0])
    return Shape(
        counts.matmul_base,
        counts.matmul_lora,
        len(specs),
        first.num_heads,
        first.head_dim,
        tuple(s.window for s in specs),
        specs,
    )


def pairs_seen(seq_len: int, window: int | None) -> float:
    """(query, key) pairs one causal layer computes per sequence: L^2/2, or w*L - w^2/2 in a window."""
    if window is None or window >= seq_len:
        return seq_len**2 / 2.0
    return window * seq_len - window**2 / 2.0


def layer_flops(spec: layer_types.LayerSpec, *, batch_size: int, seq_len: int) -> float:
    """One layer's token mixing, forward and backward (module docstring); 0 for a type not analysed."""
    if spec.kind == "softmax":
        return 12.0 * batch_size * pairs_seen(seq_len, spec.window) * spec.num_heads * spec.head_dim
    if spec.kind == "linear":
        dk, dv = spec.linear_key_dim, spec.linear_value_dim
        per_head = 6.0 * dk * dv + LINEAR_CHUNK * (dk + dv)
        tokens = batch_size * seq_len
        return 3.0 * tokens * spec.linear_value_heads * per_head + 4.0 * tokens * spec.conv_kernel * spec.conv_dim
    return 0.0


def step_flops(shape: Shape, *, batch_size: int, seq_len: int) -> float:
    tokens = batch_size * seq_len
    if shape.layers:
        mixing = sum(layer_flops(s, batch_size=batch_size, seq_len=seq_len) for s in shape.layers)
    else:
        windows = shape.windows or (None,) * shape.num_layers
        pairs = sum(pairs_seen(seq_len, w) for w in windows)
        mixing = 12.0 * batch_size * pairs * shape.num_heads * shape.head_dim
    return 4.0 * tokens * shape.num_base_linear + 6.0 * tokens * shape.num_lora + mixing


def measure_peak_flops(device: torch.device, *, size: int = 8192, repeats: int = 10) -> float:
    """bf16 dense matmul rate on random data (zeros run faster: docs/measurement.md), FLOP/s."""
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(repeats):
        a @ b
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1000.0 / repeats
    return 2.0 * size**3 / seconds
