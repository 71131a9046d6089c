"""A harness whose train_step appends "pid parent-pid $LAB_MARK frozen" to $LABPROBE_TEST_CALLS_FILE: which process
measured, forked from which, under which environment, and how many objects were frozen out of its collector then."""

import gc
import os

from probes.step.harness import compute_loss, discover_target_modules, make_optimizer  # noqa: F401


def train_step(model, batches, optimizer):
    loss = 0.0
    for batch in batches:
        out = compute_loss(model, batch)
        out.backward()
        loss = loss + out.detach()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    with open(os.environ["LABPROBE_TEST_CALLS_FILE"], "a") as handle:
        handle.write(f"{os.getpid()} {os.getppid()} {os.environ.get('LAB_MARK', '-')} {gc.get_freeze_count()}\n")
    return loss
