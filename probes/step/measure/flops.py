"""FLOPs of one LoRA training step over a frozen base, and the peak they are divided by for MFU.

For T = batch x seq_len tokens, a step costs

    4 * T * N_base  +  6 * T * N_lora  +  2 * T * N_trained  +  3 * fold
    +  sum over layers of that layer's own token-mixing cost

- N_base: the frozen matmul weights one token goes through (probes.step.train.params): every linear layer,
  lm_head included (it runs even when tied to the embedding), the fused experts (3-D parameters,
  not nn.Linear) at top_k / num_experts of themselves, a router's weight; embeddings and norms do
  no matmul. Frozen: the forward costs 2*T*N and the backward only the activation gradient,
  another 2*T*N (no weight gradient).
- N_lora: LoRA A and B weights of linear layers, trained: forward 2*T*N, backward activation + weight
  grads 4*T*N.
- N_trained, fold: LoRA on a bare parameter (PEFT's `target_parameters`, the fused experts) runs no
  adapter matmul per token. Each forward folds the adapter into the weight, W' = W + s*B@A (`fold`,
  2*r*elements of W), the experts' matmuls read W', which requires grad, so the backward also computes
  W''s weight gradient (2*T*N_trained, N_trained the wrapped weights at their active share) and two
  products to pass it to A and B (2 * fold).
- softmax attention (full and sliding layers), each layer at its own heads and head_dim (Gemma-4:
  512 on full layers, 256 on sliding ones): 12 * heads * head_dim per (query, key) pair seen
  (forward 4*h*d: scores and values; backward twice that). A causal layer sees L^2/2 pairs per
  sequence; a sliding layer (window w) min(position+1, w) keys per query: w*L - w^2/2 pairs when L > w.
- linear attention (Gated DeltaNet, Qwen3.5 / Qwen3-Next `linear_attention` layers): the chunked gated
  delta rule of flash-linear-attention (and of transformers' reference), per sequence cut into
  ceil(L / C) chunks of C = 64 tokens, per chunk and value head with key/value head dims dk, dv, forward
  2*C^2*(3*dk + 2*dv) (within the chunk, C x C tiles: K K^T, the system's solution applied to K and V,
  Q K^T, and its product with the new values) + 6*C*dk*dv (the state: read by the chunk's keys and
  queries, and updated); the backward twice the forward. Plus the causal depthwise convolution of kernel
  K over conv_dim channels, frozen, on the L + K - 1 positions its padding gives: 2*K*conv_dim each way.
  Linear in L: at 32k tokens a hybrid's 48 linear layers cost less than one full layer.

Not counted: element-wise work, norms, softmax, routing's top-k, the triangular inverse inside a chunk
(C^3/3 a chunk, elementwise in the reference), the optimizer, the first layer's activation gradients that
autograd skips (its input, the frozen embedding, needs none: under 0.5% of a real model's backward), and
the fold PEFT 0.21 evaluates once more per forward when it registers the parametrization (a check whose
result is thrown away). Counted against torch's FlopCounterMode on real forward and backward passes in
tests/probes/step/measure/test_flops_counted.py. MFU is named by its peak: the
measured one (a large bf16 matmul on the device, `measure_peak_flops`: about 790-800 TFLOP/s on an
H200 on random data, docs/measurement.md) or the datasheet's dense bf16 rate (`datasheet_peak_flops`,
the table in probes.step.measure.peaks: 989 TFLOP/s for the H100/H200 SXM), the conventional MFU denominator,
so the two differ by about 1.23x there.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from probes.step.measure import peaks
from probes.step.train import layer_types, params

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
    """Per layer, its type and sizes (probes.step.train.layer_types); when given, each layer is charged its own
    cost and num_heads/head_dim/windows are not used."""
    num_trained_base: float = 0.0
    """Frozen weights read through a LoRA fold, whose weight gradient the backward computes (params.Counts)."""
    fold: float = 0.0
    """FLOPs of folding adapters into their wrapped parameters, once per forward."""


def datasheet_peak_flops(device_name: str) -> float | None:
    """The datasheet's dense bf16 peak for a device name, FLOP/s; None for a card probes.step.measure.peaks lacks."""
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
        counts.matmul_trained,
        counts.fold,
    )


def pairs_seen(seq_len: int, window: int | None) -> float:
    """(query, key) pairs one causal layer computes per sequence: L^2/2, or w*L - w^2/2 in a window."""
    if window is None or window >= seq_len:
        return seq_len**2 / 2.0
    return window * seq_len - window**2 / 2.0


def linear_forward(spec: layer_types.LayerSpec, *, batch_size: int, seq_len: int) -> tuple[float, float]:
    """A linear-attention layer's forward: (the chunked gated delta rule, the convolution), FLOPs."""
    dk, dv, c = spec.linear_key_dim, spec.linear_value_dim, LINEAR_CHUNK
    per_chunk = 2.0 * c * c * (3 * dk + 2 * dv) + 6.0 * c * dk * dv
    chunks = batch_size * math.ceil(seq_len / c)
    conv = 2.0 * batch_size * (seq_len + spec.conv_kernel - 1) * spec.conv_kernel * spec.conv_dim
    return chunks * spec.linear_value_heads * per_chunk, conv


def layer_flops(spec: layer_types.LayerSpec, *, batch_size: int, seq_len: int) -> float:
    """One layer's token mixing, forward and backward (module docstring); 0 for a type not analysed."""
    if spec.kind == "softmax":
        return 12.0 * batch_size * pairs_seen(seq_len, spec.window) * spec.num_heads * spec.head_dim
    if spec.kind == "linear":
        rule, conv = linear_forward(spec, batch_size=batch_size, seq_len=seq_len)
        return 3.0 * rule + 2.0 * conv  # the convolution is frozen: no weight gradient
    return 0.0


def step_flops(shape: Shape, *, batch_size: int, seq_len: int) -> float:
    tokens = batch_size * seq_len
    if shape.layers:
        mixing = sum(layer_flops(s, batch_size=batch_size, seq_len=seq_len) for s in shape.layers)
    else:
        windows = shape.windows or (None,) * shape.num_layers
        pairs = sum(pairs_seen(seq_len, w) for w in windows)
        mixing = 12.0 * batch_size * pairs * shape.num_heads * shape.head_dim
    weights = 4.0 * tokens * shape.num_base_linear + 6.0 * tokens * shape.num_lora
    return weights + 2.0 * tokens * shape.num_trained_base + 3.0 * shape.fold + mixing


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
