"""params_total / params_active and the step's FLOPs, recomputed by hand for a tiny config of each family
(tests/probes/conftest.py: TINY_FAMILIES). Every weight shape below is written out from the architecture,
not read from the code under test."""

from __future__ import annotations

import torch

from probes.step import harness as reference
from probes.step.measure import flops
from probes.step.train import models, params

B, L = 2, 24  # L > the Gemma-4 tiny window (8), so the band is charged


def build(checkpoint):
    return models.build_model(checkpoint, weights="random", device=torch.device("meta"))


def softmax_pairs(window=None):
    return L * L / 2 if window is None else window * L - window * window / 2


def test_hybrid_qwen3_5(hybrid):
    h, inter, vocab = 32, 48, 128
    full_attn = h * (2 * 2 * 16) + 2 * h * 16 + (2 * 16) * h  # q (doubled: output gate), k, v, o
    linear_attn = h * (2 * 2 * 8 + 4 * 8) + h * (4 * 8) + 2 * h * 4 + (4 * 8) * h  # qkv, z, b, a, out
    mlp = 3 * h * inter
    matmul = 3 * (linear_attn + mlp) + (full_attn + mlp) + vocab * h  # lm_head runs though tied
    shape = flops.model_shape(build(hybrid))
    assert shape.num_base_linear == matmul
    conv_dim = 2 * 2 * 8 + 4 * 8
    chunk = 2 * 64 * 64 * (3 * 8 + 2 * 8) + 6 * 64 * 8 * 8  # one 64-token chunk (L = 24 pads to one), a value head
    conv = 2 * B * (L + 4 - 1) * 4 * conv_dim  # kernel 4, over the L + 3 positions its padding gives
    linear = 3 * B * 1 * 4 * chunk + 2 * conv  # 4 value heads; forward + backward twice; the conv frozen
    full = 12 * B * softmax_pairs() * 2 * 16
    assert flops.step_flops(shape, batch_size=B, seq_len=L) == 4 * B * L * matmul + 3 * linear + full
    counts = params.count(build(hybrid))
    assert counts.params_active == counts.params_total  # dense: every token uses everything


def test_qwen3_moe_counts_fused_experts_at_top_k_of_n(qwen3_moe):
    h, moe, experts, top_k, vocab, layers = 32, 16, 4, 2, 128, 2
    attn = h * 32 + 2 * h * 16 + 32 * h
    expert_weights = experts * (2 * moe * h + h * moe)  # gate_up (E, 2*moe, h), down (E, h, moe): 3-D, no nn.Linear
    router = experts * h
    model = build(qwen3_moe)
    counts = params.count(model)
    total = sum(p.numel() for p in model.parameters())
    assert counts.params_total == total
    assert counts.params_active == total - layers * expert_weights * (1 - top_k / experts)
    matmul = layers * (attn + expert_weights * top_k / experts + router) + vocab * h
    shape = flops.model_shape(model)
    assert shape.num_base_linear == matmul
    mixing = layers * 12 * B * softmax_pairs() * 2 * 16
    assert flops.step_flops(shape, batch_size=B, seq_len=L) == 4 * B * L * matmul + mixing


def test_gemma4_per_layer_head_dim_and_experts(gemma4_moe):
    h, inter, moe, experts, top_k, vocab = 32, 48, 16, 4, 2, 128
    sliding_attn = h * 2 * 16 + 2 * h * 2 * 16 + 2 * 16 * h  # q, k, v (2 kv heads of 16), o
    full_attn = h * 2 * 32 + h * 1 * 32 + 2 * 32 * h  # q, k (1 kv head of 32, values = keys: no v_proj), o
    per_layer = 3 * h * inter + experts * h + experts * 3 * moe * h * top_k / experts  # dense MLP, router, experts
    matmul = sliding_attn + full_attn + 2 * per_layer + vocab * h
    model = build(gemma4_moe)
    shape = flops.model_shape(model)  # no AmbiguousGlobalPerLayerAttributeError on head_dim
    assert shape.num_base_linear == matmul
    mixing = 12 * B * softmax_pairs(8) * 2 * 16 + 12 * B * softmax_pairs() * 2 * 32
    assert flops.step_flops(shape, batch_size=B, seq_len=L) == 4 * B * L * matmul + mixing


def test_lora_on_experts_is_a_fold_and_a_weight_gradient(qwen3_moe):
    """PEFT adapts a fused expert stack by folding A and B into it each forward (W + s B A): no adapter
    matmul per token; the experts' matmuls then compute W''s weight gradient as for a trained weight."""
    rank, h, moe, experts, top_k, layers = 4, 32, 16, 4, 2, 2
    model = models.with_lora(build(qwen3_moe), reference, rank=rank, alpha=8)
    shape = flops.model_shape(model)
    attn_lora = layers * rank * ((h + 32) + 2 * (h + 16) + (32 + h))  # A: in x r, B: r x out per projection
    assert shape.num_lora == attn_lora  # the experts' A and B are in no per-token matmul
    stack = experts * (2 * moe * h + h * moe)  # gate_up and down of every expert, one layer
    assert shape.num_trained_base == layers * stack * top_k / experts
    assert shape.fold == layers * 2 * rank * stack  # (out x r) @ (r x in) for every expert, once per forward
    plain = flops.model_shape(build(qwen3_moe))
    tokens = B * L
    extra = 6 * tokens * attn_lora + 2 * tokens * layers * stack * top_k / experts + 3 * layers * 2 * rank * stack
    assert flops.step_flops(shape, batch_size=B, seq_len=L) == flops.step_flops(plain, batch_size=B, seq_len=L) + extra
