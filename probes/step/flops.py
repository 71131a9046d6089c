"""FLOPs of one LoRA training step over a frozen base, and the peak they are divided by for MFU.

For T = batch x seq_len tokens, a step costs

    4 * T * N_base  +  6 * T * N_lora  +  6 * layers * batch * seq_len^2 * heads * head_dim

- N_base: weights of the base model's linear layers, lm_head included (it runs even when tied to
  the embedding); embeddings and norms do no matmul. Frozen: the forward costs 2*T*N and the
  backward only the activation gradient, another 2*T*N (no weight gradient).
- N_lora: LoRA A and B weights, trained: forward 2*T*N, backward activation + weight grads 4*T*N.
- attention scores and values: per layer and sequence 4*L^2*heads*head_dim multiply-adds in the
  forward, halved by the causal mask (2*L^2*h*d), backward twice the forward: 6*L^2*h*d in all.
  That is 12*h*d per (query, key) pair seen, and a causal layer sees L^2/2 pairs; a sliding-window
  layer (config `layer_types` "sliding_attention", window w) sees min(position+1, w) keys per
  query: w*L - w^2/2 pairs when L > w (Gemma 3: five of every six layers).

Not counted: element-wise work, norms, softmax, the optimizer. MFU is named by its peak: the
measured one (a large bf16 matmul on the device, `measure_peak_flops`: about 790-800 TFLOP/s on an
H200 on random data, docs/measurement.md) or the datasheet's dense bf16 rate (`datasheet_peak_flops`,
the table in probes/step/peaks.py: 989 TFLOP/s for the H100/H200 SXM), the conventional MFU denominator,
so the two differ by about 1.23x there.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from probes.step import peaks


@dataclasses.dataclass(frozen=True)
class Shape:
    num_base_linear: int
    num_lora: int
    num_layers: int
    num_heads: int
    head_dim: int
    windows: tuple[int | None, ...] = ()
    """Per layer: the sliding window, or None for full causal attention (empty: all full)."""


def datasheet_peak_flops(device_name: str) -> float | None:
    """The datasheet's dense bf16 peak for a device name, FLOP/s; None for a card probes/step/peaks.py lacks."""
    return peaks.datasheet_peak_flops(device_name)


def _windows(config) -> tuple[int | None, ...]:
    types = getattr(config, "layer_types", None) or []
    window = getattr(config, "sliding_window", None)
    return tuple(window if t == "sliding_attention" and window else None for t in types)


def model_shape(model: nn.Module) -> Shape:
    base = lora = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if "lora_" in name:
                lora += module.weight.numel()
            else:
                base += module.weight.numel()
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Shape(base, lora, config.num_hidden_layers, heads, head_dim, _windows(config))


def pairs_seen(seq_len: int, window: int | None) -> float:
    """(query, key) pairs one causal layer computes per sequence: L^2/2, or w*L - w^2/2 in a window."""
    if window is None or window >= seq_len:
        return seq_len**2 / 2.0
    return window * seq_len - window**2 / 2.0


def step_flops(shape: Shape, *, batch_size: int, seq_len: int) -> float:
    tokens = batch_size * seq_len
    windows = shape.windows or (None,) * shape.num_layers
    pairs = sum(pairs_seen(seq_len, w) for w in windows)
    attention = 12.0 * batch_size * pairs * shape.num_heads * shape.head_dim
    return 4.0 * tokens * shape.num_base_linear + 6.0 * tokens * shape.num_lora + attention


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
