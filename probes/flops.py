"""FLOPs of one LoRA training step over a frozen base, and the peak they are divided by for MFU.

For T = batch x seq_len tokens, a step costs

    4 * T * N_base  +  6 * T * N_lora  +  6 * layers * batch * seq_len^2 * heads * head_dim

- N_base: weights of the base model's linear layers, lm_head included (it runs even when tied to
  the embedding); embeddings and norms do no matmul. Frozen: the forward costs 2*T*N and the
  backward only the activation gradient, another 2*T*N (no weight gradient).
- N_lora: LoRA A and B weights, trained: forward 2*T*N, backward activation + weight grads 4*T*N.
- attention scores and values: per layer and sequence 4*L^2*heads*head_dim multiply-adds in the
  forward, halved by the causal mask (2*L^2*h*d), backward twice the forward: 6*L^2*h*d in all.
  Sliding-window layers are counted as full (an upper bound for Gemma-style models).

Not counted: element-wise work, norms, softmax, the optimizer. The peak is named by the caller:
measured with a large bf16 matmul on the device (`measure_peak_flops`), or given (the H200's
bf16 dense rate measured here: ~790 TFLOP/s on random data, docs/measurement.md).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn


@dataclasses.dataclass(frozen=True)
class Shape:
    num_base_linear: int
    num_lora: int
    num_layers: int
    num_heads: int
    head_dim: int


def model_shape(model: nn.Module) -> Shape:
    base = lora = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if "lora_" in name:
                lora += module.weight.numel()
            else:
                base += module.weight.numel()
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return Shape(base, lora, config.num_hidden_layers, heads, head_dim)


def step_flops(shape: Shape, *, batch_size: int, seq_len: int) -> float:
    tokens = batch_size * seq_len
    attention = 6.0 * shape.num_layers * batch_size * seq_len ** 2 * shape.num_heads * shape.head_dim
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
    return 2.0 * size ** 3 / seconds
