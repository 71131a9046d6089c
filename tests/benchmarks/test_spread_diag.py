"""spread_diag's A/B of the loss's waits, its profiled segment and its sync census, on a tiny CPU step."""

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import spread_diag  # noqa: E402


@pytest.fixture(scope="module")
def tiny_step():
    from probes.step import harness as reference
    from probes.step.train import contract
    from probes.step.variants import stacks, worker
    from probes.step.variants.measurement import Spec

    spec = Spec(checkpoint=str(spread_diag._tiny_checkpoint()), weights="random", harness="benchmarks.harness_plain",
                lora_rank=4, lora_alpha=8.0, batch_size=2, seq_len=48, warmup_steps=0, steps=1, max_steps=1,
                ce_chunk=16, device="cpu", variant=stacks.get("bf16-adapters+fused-adamw"))  # fmt: skip
    pieces = spec.variant.contract(contract.resolve(reference.load_harness(spec.harness)))
    model = worker.build(spec, pieces, spec.variant, torch.device("cpu"))
    step = worker.make_step(spec, model, pieces, spec.ce_chunk, torch.device("cpu"))
    step()
    return step


def test_the_old_loss_reads_back_in_every_chunk_and_the_harness_loss_never(tiny_step):
    now = spread_diag.sync_census(tiny_step, cuda=False)
    assert not [c for c in now if c["where"].startswith(("benchmarks/spread_diag.py", "step/harness.py"))]
    with spread_diag._condition("ce_sync", cuda=False):
        before = spread_diag.sync_census(tiny_step, cuda=False)
    old = [c for c in before if c["where"].startswith("benchmarks/spread_diag.py") and "boolean mask" in c["what"]]
    # 2 x 48 tokens less the last of each row: 94 in six 16-token chunks, each indexing by a mask three times
    # in a way that waits on CUDA (y[keep]; grad[keep, y[keep]] read and written back); grad[~keep] = 0 is a
    # masked_fill there
    assert sum(c["count"] for c in old) == 3 * 6
    from probes.step import harness

    assert harness._ChunkedLinearCE is not spread_diag.SyncingCE  # the condition put the harness's loss back


def test_the_old_loss_gives_the_harness_losss_gradients():
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(29, 8, generator=g, requires_grad=True)
    weight = torch.randn(40, 8, generator=g)
    labels = torch.randint(0, 40, (29,), generator=g)
    labels[1::3] = -100
    grads = []
    for ce in (spread_diag.harness._ChunkedLinearCE, spread_diag.SyncingCE):
        hidden.grad = None
        ce.apply(hidden, weight, labels, 8).backward()
        grads.append(hidden.grad.clone())
    assert torch.equal(*grads)


def test_the_profiled_segment_keeps_a_timeline_per_step_and_a_summary(tiny_step):
    records = spread_diag.run_segment("profiled", tiny_step, 4, cuda=False)
    assert len(records) == 4 and all("timeline" in r and r["step_ms"] > 0 for r in records)
    summary = spread_diag.summarize(records)
    # on the CPU no GPU op is launched: the comparison is there, with nothing to compare
    assert summary["timeline_launches_found"] == 0.0 and summary["profiled_span_vs_events_ms"] is None
    assert set(summary["timeline"]) >= {"busy_ms", "host_starved_ms", "kernels_grew_ms", "host_ops_at_bumps_ms"}


def test_the_thread_census_lists_this_thread_and_a_started_one_by_name():
    import threading

    stop = threading.Event()
    extra = threading.Thread(target=stop.wait, name="poller-under-test", daemon=True)
    extra.start()
    try:
        seen = spread_diag._threads()
    finally:
        stop.set()
    assert {"MainThread", "poller-under-test"} <= set(seen["python"])
    # Ray may have child processes here; /proc may not list children (the kernel's option): None then
    assert sum(seen["native"].values()) >= 2 and (seen["child_processes"] is None or seen["child_processes"] >= 0)
