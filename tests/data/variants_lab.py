"""A lab's own variants, imported by path (`--variant variants_lab:ZERO_GRAD`): ZERO_GRAD is broken on
purpose (the first decoder layer's adapters never learn), for the numerics price to catch."""

import torch

from probes.step.variants import Variant


def _zero_first_layer(model) -> None:
    for name, p in model.named_parameters():
        if p.requires_grad and ".layers.0." in name:
            p.register_hook(torch.zeros_like)


ZERO_GRAD = Variant(
    "zero-grad", "broken on purpose: the first decoder layer's adapter gradients are zeroed", prepare=_zero_first_layer
)
