"""A lab's own training harness, outside the labprobe package: LoRA on q_proj and v_proj only, and
the loss the model itself computes. Counts its calls so a test can see the probe used it."""

import torch

calls = {"discover": 0, "loss": 0}


def discover_target_modules(model) -> list[str]:
    calls["discover"] += 1
    return ["q_proj", "v_proj"]


def compute_loss(model, batch) -> torch.Tensor:
    calls["loss"] += 1
    return model(input_ids=batch["input_ids"], labels=batch["labels"], use_cache=False).loss
