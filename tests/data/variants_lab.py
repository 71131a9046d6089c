"""A lab's own variants, imported by path (`--variant variants_lab:ZERO_GRAD`), broken on purpose for the
numerics price to catch: ZERO_GRAD (the first decoder layer's adapters never learn), ZERO_A (no LoRA A
ever learns: at build every B is zero, so a first step's A gradients are zero anyway and only a probe
from non-zero B sees the difference)."""

import torch

from probes.step.variants.catalog import Variant


def _zero_first_layer(model) -> None:
    for name, p in model.named_parameters():
        if p.requires_grad and ".layers.0." in name:
            p.register_hook(torch.zeros_like)


ZERO_GRAD = Variant(
    "zero-grad", "broken on purpose: the first decoder layer's adapter gradients are zeroed", prepare=_zero_first_layer
)


def _zero_lora_a(model) -> None:
    for name, p in model.named_parameters():
        if p.requires_grad and ".lora_A." in name:
            p.register_hook(torch.zeros_like)


ZERO_A = Variant("zero-a", "broken on purpose: every LoRA A gradient is zeroed", prepare=_zero_lora_a)
