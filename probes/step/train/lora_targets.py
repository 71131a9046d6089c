"""What LoRA adapts in a mixture-of-experts (or any) model, and what it leaves alone, said by name.

A router is a linear layer too (Gemma-4's `router.proj`, 2,816 -> 128): adapting it changes which
experts a token goes to, so the reference never targets one (`is_router`). The experts of Gemma-4 and
Qwen3-MoE are fused 3-D parameters (`experts.gate_up_proj`: experts x 2*moe_intermediate x hidden),
not nn.Linear, so `target_modules` cannot reach them; PEFT (>= 0.17; 0.21 here) adapts them through
`LoraConfig(target_parameters=[...])`, which the reference asks for (`discover_target_parameters` in
probes.step.harness). `apply` runs the harness's pieces; `describe` reads the adapted model back: which
decoder weights got an adapter and which did not, so the summary never hides 22.8 B expert parameters
left out.
"""

from __future__ import annotations

import inspect
import re
from types import ModuleType

from torch import nn

from probes.result import InputError
from probes.step.train.layer_types import experts
from probes.step.train.params import text_config

_ROUTER_NAMES = ("router", "gate")


def is_router(name: str, module: nn.Module, num_experts: int | None) -> bool:
    """A linear layer that scores experts: named under a `router`/`gate` module, or with one output per expert."""
    if not isinstance(module, nn.Linear):
        return False
    parts = name.split(".")
    if any(p in _ROUTER_NAMES for p in parts[:-1]) or parts[-1] in _ROUTER_NAMES:
        return True
    return num_experts is not None and module.out_features == num_experts


def num_experts(model: nn.Module) -> int | None:
    moe = experts(text_config(model))
    return None if moe is None else moe[0]


def apply(harness: ModuleType, apply_lora, fallback_find, model: nn.Module, *, rank: int, alpha: float):
    """LoRA through the harness: its module targets, and its expert parameters where its apply_lora takes
    `target_parameters` (the reference's does); `fallback_find` lists them when the harness has no
    `discover_target_parameters`."""
    targets = list(harness.discover_target_modules(model))
    if not targets:
        raise InputError(f"{harness.__name__}.discover_target_modules found no target modules")
    find = getattr(harness, "discover_target_parameters", fallback_find)
    parameters = list(find(model))
    if parameters and "target_parameters" in inspect.signature(apply_lora).parameters:
        return apply_lora(model, rank=rank, alpha=alpha, targets=targets, target_parameters=parameters)
    return apply_lora(model, rank=rank, alpha=alpha, targets=targets)


def _plain(name: str) -> str:
    """A decoder weight's name without PEFT's wrappers or the layer path: `mlp.experts.gate_up_proj`."""
    name = re.sub(r"(\.base_layer)+", "", name)
    return re.sub(r"^.*?layers\.\d+\.", "", name)


def describe(model: nn.Module) -> dict[str, list[str]]:
    """{"targeted": [...], "not_targeted": [...]}: decoder weights (2-D and up: what a matmul reads) with
    and without a LoRA adapter, by name within a layer; a router or expert left out says so."""
    adapted: set[str] = set()
    for name, module in model.named_modules():
        if hasattr(module, "lora_A") and "layers." in name:
            param = getattr(module, "parameter_name", None)
            adapted.add(_plain(f"{name}.{param or 'weight'}"))
    weights = {
        _plain(name)
        for name, p in model.named_parameters()
        if "layers." in name and p.ndim >= 2 and "lora_" not in name
    }
    moe = num_experts(model)

    def why(name: str) -> str:
        if any(part in _ROUTER_NAMES for part in name.split(".")[:-1]) or (
            moe and name.endswith("weight") and _out_features(model, name) == moe
        ):
            return f"{name} (router)"
        return f"{name} (experts)" if ".experts." in f".{name}" else name

    return {
        "targeted": sorted(adapted & weights),
        "not_targeted": sorted(why(n) for n in weights - adapted),
    }


def _out_features(model: nn.Module, plain: str) -> int | None:
    for name, p in model.named_parameters():
        if _plain(name) == plain:
            return p.shape[0]
    return None
