"""Parameters of what really runs: total, active per token, and the matmul weights a token goes through.

- `params_total`: every parameter once (a tied embedding once), the LoRA adapters included.
- `params_active`: what one token uses. In a mixture-of-experts layer a token runs through `top_k` of
  `num_experts` experts, so each expert parameter counts top_k / num_experts of itself; the router,
  attention, norms, embeddings and any dense MLP beside the experts (Gemma-4) count whole. For a dense
  model active == total.
- `matmul_base` / `matmul_lora`: the weights the step's matmul FLOPs are charged on (probes.step.flops),
  at the same active share: every nn.Linear (lm_head included, even tied: it runs), the fused experts
  (3-D parameters of an `experts` module, which are no nn.Linear: `Qwen3MoeExperts.gate_up_proj` of
  shape (experts, 2 x moe_intermediate, hidden)), and a router's bare 2-D weight (Qwen3-MoE's
  `mlp.gate`). Embeddings, norms and 1-D parameters do no matmul; a linear-attention layer's depthwise
  convolution is charged with its layer (probes.step.flops).
"""

from __future__ import annotations

import dataclasses

from torch import nn

from probes.step.layer_types import experts


@dataclasses.dataclass(frozen=True)
class Counts:
    params_total: int
    params_active: float
    matmul_base: float
    """Frozen matmul weights one token goes through (expert weights at top_k / num_experts)."""
    matmul_lora: float
    """LoRA matmul weights one token goes through (adapters of experts at top_k / num_experts)."""
    num_experts: int | None = None
    experts_per_token: int | None = None


def text_config(model: nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _is_expert(name: str) -> bool:
    """Inside an `experts` module (fused expert weights, or PEFT's adapters wrapped around them)."""
    return any(part == "experts" for part in name.split(".")[:-1])


def _matmul_weights(model: nn.Module) -> dict[str, int]:
    """name -> elements of every weight a matmul reads (see the module docstring)."""
    out: dict[str, int] = {}
    for module_name, module in model.named_modules():
        if isinstance(module, nn.Embedding):
            continue
        for name, p in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if isinstance(module, nn.Linear) and name == "weight":
                out[full] = p.numel()
            elif not isinstance(module, nn.Linear) and (p.ndim == 3 and _is_expert(full) or p.ndim == 2):
                out[full] = p.numel()
    return out


def count(model: nn.Module) -> Counts:
    moe = experts(text_config(model))
    share = 1.0 if moe is None else moe[1] / moe[0]
    total = active = 0.0
    for name, p in model.named_parameters():  # de-duplicated: a tied weight once
        total += p.numel()
        active += p.numel() * (share if _is_expert(name) else 1.0)
    base = lora = 0.0
    for name, n in _matmul_weights(model).items():
        weight = n * (share if _is_expert(name) else 1.0)
        if "lora_" in name:
            lora += weight
        else:
            base += weight
    return Counts(
        params_total=int(total),
        params_active=active,
        matmul_base=base,
        matmul_lora=lora,
        num_experts=None if moe is None else moe[0],
        experts_per_token=None if moe is None else moe[1],
    )
