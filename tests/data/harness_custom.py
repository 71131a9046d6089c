"""A lab's own training harness, outside the labprobe package: LoRA on q_proj and v_proj only, and
the loss the model itself computes. Counts its calls so a test can see the probe used it: in
`calls`, and one line per call in $LABPROBE_TEST_CALLS_FILE when set (the probes' worker processes run it)."""

import os

import torch

calls = {"discover": 0, "loss": 0}


def _count(name: str) -> None:
    calls[name] += 1
    if os.environ.get("LABPROBE_TEST_CALLS_FILE"):
        with open(os.environ["LABPROBE_TEST_CALLS_FILE"], "a") as handle:
            handle.write(name + "\n")


def discover_target_modules(model) -> list[str]:
    _count("discover")
    return ["q_proj", "v_proj"]


def compute_loss(model, batch) -> torch.Tensor:
    _count("loss")
    return model(input_ids=batch["input_ids"], labels=batch["labels"], use_cache=False).loss
