"""Parameters of what really runs: total, active per token, and the matmul weights a token goes through.

- `params_total`: every parameter once (a tied embedding once), the LoRA adapters included.
- `params_active`: what one token uses. In a mixture-of-experts layer a token runs through `top_k` of
  `num_experts` experts, so each expert parameter counts top_k / num_experts of itself; the router,
  attention, norms, embeddings and any dense MLP beside the experts (Gemma-4) count whole. For a dense
  model active == total.
- `matmul_base` / `matmul_lora`: the weights the step's matmul FLOPs are charged on (probes.step.measure.flops),
  at the same active share: every nn.Linear (lm_head included, even tied: it runs), the fused experts
  (3-D parameters of an `experts` module, which are no nn.Linear: `Qwen3MoeExperts.gate_up_proj` of
  shape (experts, 2 x moe_intermediate, hidden)), and a router's bare 2-D weight (Qwen3-MoE's
  `mlp.gate`). Embeddings, norms and 1-D parameters do no matmul; a linear-attention layer's depthwise
  convolution is charged with its layer (probes.step.measure.flops).
- `matmul_trained` / `fold`: a parameter adapted through PEFT's `target_parameters` (its ParamWrapper:
  the fused experts) gets no LoRA matmul per token. Each forward folds the adapter into the weight,
  W' = W + s B A (`fold`: 2 r elements of W, once per forward), and the experts' matmuls read W', which
  requires grad, so the backward computes W''s weight gradient as for a trained weight (`matmul_trained`,
  at the active share) and folds that gradient back into A and B (twice the fold). The adapters' A and B
  are therefore not in `matmul_lora`. Counted against torch's FlopCounterMode in
  tests/probes/step/measure/test_flops_counted.py.
"""

from __future__ import annotations

import dataclasses

from torch import nn

from probes.step.train.layer_types import experts


@dataclasses.dataclass(frozen=True)
class Counts:
    params_total: int
    params_active: float
    matmul_base: float
    """Frozen matmul weights one token goes through (expert weights at top_k / num_experts)."""
    matmul_lora: float
    """LoRA matmul weights one token goes through (adapters of nn.Linear layers; those of a wrapped
    parameter are folded into it instead: `fold`)."""
    matmul_trained: float = 0.0
    """Frozen matmul weights read through a LoRA fold (wrapped experts, at top_k / num_experts): the backward
    computes their weight gradient too."""
    fold: float = 0.0
    """FLOPs of folding the adapters into their wrapped parameters, once per forward: 2 x rank x elements."""
    num_experts: int | None = None
    experts_per_token: int | None = None


def text_config(model: nn.Module):
    config = model.config
    return config.get_text_config() if hasattr(config, "get_text_config") else config


def _is_expert(name: str) -> bool:
    """Inside an `experts` module (fused expert weights, or PEFT's adapters wrapped around them)."""
    return any(part == "experts" for part in name.split(".")[:-1])


def _wrappers(model: nn.Module) -> dict[str, tuple[str, int, int]]:
    """PEFT ParamWrappers (LoRA on a bare parameter, `target_parameters`): module name -> (the wrapped
    parameter's name, its elements, the sum of its adapters' ranks)."""
    out = {}
    for name, module in model.named_modules():
        if hasattr(module, "parameter_name") and hasattr(module, "lora_A") and hasattr(module, "get_param"):
            ranks = sum(module.r[a] for a in module.lora_A if a in module.r)
            out[name] = (f"{name}.{module.parameter_name}", module.get_param().numel(), ranks)
    return out


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
    wrappers = _wrappers(model)
    base = lora = 0.0
    for name, n in _matmul_weights(model).items():
        weight = n * (share if _is_expert(name) else 1.0)
        if "lora_" not in name:
            base += weight
        elif name.split(".lora_")[0] not in wrappers:  # a wrapper's A and B only take part in its fold
            lora += weight
    trained = sum(n * (share if _is_expert(param) else 1.0) for param, n, _ in wrappers.values())
    return Counts(
        params_total=int(total),
        params_active=active,
        matmul_base=base,
        matmul_lora=lora,
        matmul_trained=trained,
        fold=sum(2.0 * rank * n for _, n, rank in wrappers.values()),
        num_experts=None if moe is None else moe[0],
        experts_per_token=None if moe is None else moe[1],
    )
