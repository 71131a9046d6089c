"""A lab harness whose optimizer holds two parameter groups, the LoRA B weights before the LoRA A ones (as a
LoRA+ setup arranges them; here at one lr, so it trains as one group would), with its own betas and eps
and a for-each AdamW. The reference's other pieces."""

import torch

from probes.step.harness import compute_loss, discover_target_modules  # noqa: F401  (the contract's pieces)


def make_optimizer(params) -> torch.optim.Optimizer:
    params = list(params)
    b = [p for p in params if p.ndim == 2 and p.shape[1] < p.shape[0]]  # B: (out, rank); A: (rank, in)
    a = [p for p in params if all(p is not q for q in b)]
    groups = [{"params": b}, {"params": a}]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-6, weight_decay=0.1, foreach=True)
