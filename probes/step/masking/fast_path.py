"""SDPA's maskless fast path: whether an attention call keeps it by torch's own rules, and whether every
decoder layer of a model keeps it on a probe batch (the recorded forward, probes.step.masking.attention_calls).
The `mask` probe shows it layer by layer; `profile`'s padding penalty says it of each case."""

from __future__ import annotations

import torch

from probes.step.masking.attention_calls import Call, ForwardConfig, check_lengths, record_forward
from probes.step.train import layer_types
from probes.step.train.checkpoint import load_text_config

HALF_DTYPES = {"bfloat16", "float16"}


def flash_eligible(call: Call, config: ForwardConfig, head_dim: int, num_heads: int, num_kv: int) -> bool:
    """Flash-eligible by torch's SDPA rules at the real widths; torch's own check where CUDA exists."""
    if config.attn_implementation != "sdpa" or call.mask is not None or not call.is_causal:
        return False
    if torch.cuda.is_available():
        return _torch_flash_check(config.dtype, head_dim, num_heads, num_kv)
    # sdp_utils.cpp: no explicit mask, fp16/bf16, head_dim <= 256, is_causal only with q == kv.
    return config.dtype in HALF_DTYPES and head_dim <= 256 and call.q_len == call.kv_len


def _torch_flash_check(dtype: str, head_dim: int, num_heads: int, num_kv: int) -> bool:
    dt = getattr(torch, dtype)
    q = torch.empty(1, num_heads, 128, head_dim, device="cuda", dtype=dt)
    kv = torch.empty(1, num_kv, 128, head_dim, device="cuda", dtype=dt)
    params = torch.backends.cuda.SDPAParams(q, kv, kv, None, 0.0, True, num_heads != num_kv)
    return bool(torch.backends.cuda.can_use_flash_attention(params, False))


def all_layers(config: ForwardConfig) -> bool | None:
    """Whether every softmax-attention layer keeps the fast path: each makes an attention call, and each
    call is flash-eligible (a linear-attention layer makes none and is not asked). A batch the model cannot
    take or this machine cannot hold, or an architecture the recorded forward cannot build, gives None
    (unknown)."""
    try:
        text_config = load_text_config(config.checkpoint)
        check_lengths(config, text_config)
        calls, _ = record_forward(config, text_config)
    except Exception:
        return None
    if not calls:
        return None
    by_layer = {call.layer: call for call in calls}
    return all(
        spec.layer in by_layer
        and flash_eligible(by_layer[spec.layer], config, spec.head_dim, spec.num_heads, spec.num_kv_heads)
        for spec in layer_types.layer_specs(text_config)
        if spec.kind == "softmax"
    )
