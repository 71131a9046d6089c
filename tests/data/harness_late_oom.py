"""A harness whose optimizer runs out of memory from its second construction on: the timed step's optimizer
is built once, the numerics price builds a fresh one (then the micro-benchmarks theirs), so the step is timed
and every later stage runs out, as a stage needing more than the step does on a GPU near its limit."""

import torch

from probes.step.harness import compute_loss, discover_target_modules  # noqa: F401
from probes.step.harness import make_optimizer as reference

BUILT = [0]


def make_optimizer(params) -> torch.optim.Optimizer:
    BUILT[0] += 1
    if BUILT[0] > 1:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 3.00 GiB")
    return reference(params)
