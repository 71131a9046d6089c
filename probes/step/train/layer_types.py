"""What each decoder layer of a model is, read from its config (per layer, never from a global value).

Dense models (Qwen3, Gemma-3) have softmax attention in every layer, full or sliding. Hybrid models
(Qwen3.5, Qwen3-Next) put Gated DeltaNet `linear_attention` layers beside full ones: a recurrent
state of `linear_num_value_heads` x `linear_key_head_dim` x `linear_value_head_dim` per sequence,
no mask at all. Gemma-4 gives its full layers another head_dim (512) and key/value head count than
its sliding ones (256): transformers 5.x keeps those in `per_layer_config` and raises
`AmbiguousGlobalPerLayerAttributeError` on the global attribute. Mixture-of-experts models (Gemma-4,
Qwen3-MoE) route each token to `top_k` of `num_experts` experts.

`layer_specs(config)` gives one `LayerSpec` per layer; `tiny_config(config)` the same layer types at
a width small enough to run a forward on a CPU in seconds (the mask probe's reduced model), every
size shrunk, the `linear_*` and expert ones included.
"""

from __future__ import annotations

import dataclasses
from typing import Any

SOFTMAX_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
LINEAR_TYPES = ("linear_attention",)
TOP_K_FIELDS = ("num_experts_per_tok", "top_k_experts", "moe_top_k", "num_experts_per_token")
NUM_EXPERTS_FIELDS = ("num_experts", "num_local_experts", "n_routed_experts")


@dataclasses.dataclass(frozen=True)
class LayerSpec:
    layer: int
    layer_type: str
    """`full_attention`, `sliding_attention`, `linear_attention`, or whatever else the config names."""
    kind: str
    """softmax (full or sliding attention), linear (a recurrent state) or other (named, not analysed)."""
    num_heads: int | None
    num_kv_heads: int | None
    head_dim: int | None
    window: int | None
    """Keys a sliding layer's query sees, itself included; None for full attention."""
    linear_value_heads: int | None = None
    linear_key_dim: int | None = None
    linear_value_dim: int | None = None
    conv_kernel: int | None = None
    conv_dim: int | None = None
    """Channels of the linear layer's causal depthwise convolution (q, k and v together)."""


def layer_value(config, layer: int, name: str, default: Any = None) -> Any:
    """A per-layer attribute (Gemma-4's head_dim), or the config's own where it is the same everywhere."""
    if getattr(config, "is_heterogeneous", False) and name in (config.per_layer_attributes or ()):
        return getattr(config.per_layer_config[layer], name, default)
    return getattr(config, name, default)


def layer_types(config) -> list[str]:
    """The config's `layer_types`; without them every layer is alike: sliding where the config keeps a
    sliding window (Qwen3-MoE with use_sliding_window, Mistral: their attention reads config.sliding_window),
    else full."""
    types = getattr(config, "layer_types", None)
    if types:
        return list(types)
    alike = "sliding_attention" if getattr(config, "sliding_window", None) else "full_attention"
    return [alike] * config.num_hidden_layers


def _kind(layer_type: str) -> str:
    if layer_type in SOFTMAX_TYPES:
        return "softmax"
    return "linear" if layer_type in LINEAR_TYPES else "other"


def layer_spec(config, layer: int, layer_type: str) -> LayerSpec:
    kind = _kind(layer_type)
    heads = config.num_attention_heads
    head_dim = layer_value(config, layer, "head_dim") or config.hidden_size // heads
    kv = layer_value(config, layer, "num_key_value_heads") or heads
    window = getattr(config, "sliding_window", None) if layer_type == "sliding_attention" else None
    if kind != "linear":
        return LayerSpec(layer, layer_type, kind, heads, kv, head_dim, window)
    key_dim, value_dim = config.linear_key_head_dim, config.linear_value_head_dim
    key_heads, value_heads = config.linear_num_key_heads, config.linear_num_value_heads
    return LayerSpec(
        layer,
        layer_type,
        kind,
        heads,
        kv,
        head_dim,
        None,
        linear_value_heads=value_heads,
        linear_key_dim=key_dim,
        linear_value_dim=value_dim,
        conv_kernel=getattr(config, "linear_conv_kernel_dim", 4),
        conv_dim=2 * key_heads * key_dim + value_heads * value_dim,
    )


def layer_specs(config) -> list[LayerSpec]:
    return [layer_spec(config, i, t) for i, t in enumerate(layer_types(config))]


def experts(config) -> tuple[int, int] | None:
    """(num_experts, experts per token) of an MoE config; None for a dense one."""
    num = next((getattr(config, f) for f in NUM_EXPERTS_FIELDS if getattr(config, f, None)), None)
    top_k = next((getattr(config, f) for f in TOP_K_FIELDS if getattr(config, f, None)), None)
    if getattr(config, "enable_moe_block", True) is False or not num or not top_k:
        return None
    return int(num), int(top_k)


_TINY = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 16,
    "vocab_size": 256,
    # hybrid linear attention (Qwen3.5, Qwen3-Next): without these the reduced model keeps the real
    # 16 x 128 key and 48 x 128 value heads and a 64-layer mask run takes minutes instead of seconds
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_num_key_heads": 1,
    "linear_num_value_heads": 2,
    # mixture of experts
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 16,
    "num_experts": 4,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
    "top_k_experts": 2,
    "hidden_size_per_layer_input": 0,
    "vocab_size_per_layer_input": 256,
}


def tiny_config(config):
    """The same layer types, window and attention flags at a CPU-sized width (masks and state resets do
    not depend on widths). Only the fields this config has are reduced; per-layer head_dims keep their
    ratio (Gemma-4: full layers twice the sliding ones), so per-layer shapes still differ."""
    raw = config.to_dict()
    tiny = {k: v for k, v in _TINY.items() if k in raw and raw[k] is not None}
    base_dim = raw.get("head_dim") or raw["hidden_size"] // raw["num_attention_heads"]
    overrides = raw.get("per_layer_config") or {}
    if overrides:
        tiny["per_layer_config"] = {
            layer: {
                **values,
                **({"head_dim": max(8, 16 * values["head_dim"] // base_dim)} if "head_dim" in values else {}),
                **({"num_key_value_heads": 1} if "num_key_value_heads" in values else {}),
            }
            for layer, values in overrides.items()
        }
    # special tokens inside the reduced vocabulary, or transformers warns about every one
    return config.__class__(**{**raw, **tiny, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2})
