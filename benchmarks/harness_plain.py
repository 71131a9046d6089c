"""A lab harness without autocast: the reference's LoRA, loss and targets, no autocast (the LoRA
matmuls run in fp32 on PEFT's fp32 adapter weights) and a for-each AdamW at lr 1e-4. It is the
step the probes measured before the harness contract was whole (issue 15), used by
benchmarks/bench_variants.py as the baseline the variants improve on."""

import torch

from probes.step.harness import apply_lora, compute_loss, discover_target_modules  # noqa: F401

autocast_dtype = None
gradient_checkpointing = False


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=1e-4, foreach=True)
