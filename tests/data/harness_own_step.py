"""A lab harness that brings its own optimizer (SGD), precision (bf16 autocast) and train_step: the
probes must use each as given. The train_step appends a line to $LABPROBE_TEST_CALLS_FILE per call (it
runs in the probe's worker processes, so a file is how a test sees it)."""

import os

import torch

from probes.step.harness import compute_loss, discover_target_modules  # noqa: F401

autocast_dtype = torch.bfloat16
gradient_checkpointing = False


def make_optimizer(params) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=0.01)


def train_step(model, batches, optimizer):
    loss = 0.0
    for batch in batches:
        device = batch["input_ids"].device.type
        with torch.autocast(device_type=device, dtype=autocast_dtype):
            out = compute_loss(model, batch)
            under_autocast = torch.is_autocast_enabled(device)
        out.backward()
        loss = loss + out.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if os.environ.get("LABPROBE_TEST_CALLS_FILE"):
        with open(os.environ["LABPROBE_TEST_CALLS_FILE"], "a") as handle:
            handle.write(f"{type(optimizer).__name__} {under_autocast}\n")
    return loss
