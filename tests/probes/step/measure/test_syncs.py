"""The sync census names each wait for the device by the line outside torch that made it, per step."""

import warnings

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from probes.step.measure import syncs


def _step_that_logs_its_loss(x: torch.Tensor):
    def step():
        kept = x[x > 0]  # indexing by a boolean mask: nonzero on CUDA
        loss = kept.square().mean()
        return float(loss)  # a loss logged every step: .item()

    return step


def test_each_wait_is_named_by_its_line_and_counted_once_a_step():
    x = torch.randn(64, generator=torch.Generator().manual_seed(0))
    rows = syncs.census(_step_that_logs_its_loss(x), torch.device("cpu"))
    here = {(r.what, r.where.split(":")[0]): r.count_per_step for r in rows}
    assert here == {
        ("index by a boolean mask (nonzero)", "measure/test_syncs.py"): 1,
        ("_local_scalar_dense", "measure/test_syncs.py"): 1,
    }
    lines = {r.where.split(":")[1] for r in rows}
    assert len(lines) == 2  # two lines, each named


def test_a_step_that_waits_for_nothing_has_no_rows_and_the_census_leaves_no_mode_behind():
    x = torch.randn(8)
    assert syncs.census(lambda: (x * 2).sum(), torch.device("cpu")) == []
    for _ in range(2):  # counts a step each time, never accumulated
        rows = syncs.census(_step_that_logs_its_loss(x), torch.device("cpu"))
        assert sum(r.count_per_step for r in rows) == 2
    assert _get_current_dispatch_mode() is None


@pytest.mark.parametrize(
    ("call", "what"),
    [
        (lambda x: torch.unique(x), "_unique2"),
        (lambda x: torch.where(x > 1), "nonzero"),
        (lambda x: torch.bincount(x), "bincount"),
        (lambda x: torch.repeat_interleave(x, x), "repeat_interleave by a tensor of counts (its output size)"),
        (lambda x: bool(x[0]), "_local_scalar_dense"),
        (lambda x: int(x.max()), "_local_scalar_dense"),
        (lambda x: torch.allclose(x, x), "allclose"),
        (lambda x: torch.histc(x.float(), bins=4), "histc over the data's own range (its min and max)"),
        (lambda x: x.float()[x > 1, None], "index by a boolean mask (nonzero)"),
        (lambda x: x.clone().index_put_((x > 1,), torch.tensor([7, 8, 9])), "index_put_ by a boolean mask (nonzero)"),
        (lambda x: x.clone().__setitem__(x > 1, x.max()), "index_put_ by a boolean mask (nonzero)"),  # value on the GPU
        (
            lambda x: x.clone().__setitem__(x > 1, torch.tensor(7, device=x.device)),
            "index_put_ by a boolean mask (nonzero)",
        ),
    ],
)
def test_the_ops_whose_output_size_or_value_the_host_needs_are_each_named(call, what):
    x = torch.tensor([1, 2, 2, 0, 3])
    assert [r.what for r in syncs.census(lambda: call(x), torch.device("cpu"))] == [what]


def test_ops_the_gpu_runs_without_the_host_are_not_waits():
    x = torch.tensor([1, 2, 2, 0, 3])

    def step():
        x.masked_fill(x > 1, 0), x.repeat_interleave(2, output_size=10), (x > 1).any(), x.sum()
        torch.histc(x.float(), bins=4, min=0, max=3)  # a range given: no read back
        x.clone()[x > 1] = 0  # one mask, one value: CUDA fills by the mask, nothing to count
        x.clone().view(1, 5)[:, x > 1] = 7  # a whole dimension beside the mask: filled by the mask too

    assert syncs.census(step, torch.device("cpu")) == []


def test_the_cuda_census_counts_the_sync_warnings_by_line_and_puts_the_lab_mode_back(monkeypatch):
    modes = ["error"]  # the lab's own setting, before the census
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    monkeypatch.setattr(torch.cuda, "get_sync_debug_mode", lambda: modes[-1])
    monkeypatch.setattr(torch.cuda, "set_sync_debug_mode", modes.append)
    message = "called a synchronizing CUDA operation (Triggered internally at /pytorch/c10/cuda/CUDAFunctions.cpp:1)"

    def step():
        for _ in range(3):
            warnings.warn(message, UserWarning, stacklevel=1)
        warnings.warn("an unrelated warning", UserWarning, stacklevel=1)

    (row,) = syncs.census(step, torch.device("cuda"))
    assert row.what == "called a synchronizing CUDA operation" and row.count_per_step == 3
    assert row.where.startswith("measure/test_syncs.py:") and modes == ["error", "warn", "error"]

    def failing():
        raise RuntimeError("the step broke")

    with pytest.raises(RuntimeError):
        syncs.census(failing, torch.device("cuda"))
    assert modes[-1] == "error"


def test_a_step_in_a_folder_named_in_bytes_that_are_not_utf8_is_named_in_utf8(tmp_path):
    import importlib.util
    import os

    folder = tmp_path / os.fsdecode(b"lab\xff")
    folder.mkdir()
    (folder / "harness.py").write_text("def step(x):\n    return x.sum().item()\n")
    spec = importlib.util.spec_from_file_location("lab_harness_not_utf8", folder / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (row,) = syncs.census(lambda: module.step(torch.ones(3)), torch.device("cpu"))
    assert row.where == "lab\ufffd/harness.py:2" and row.where.encode("utf-8")


def test_the_census_of_one_thread_is_not_swayed_by_anothers_assignments_and_leaves_setitem_as_it_was():
    """Tensor.__setitem__ is patched for the whole process while a census runs: another thread assigning
    numbers meanwhile must not make this census's tensor-valued assignments look like fills, and censuses
    ending in another order than they began must leave no patch behind."""
    import sys
    import threading

    x, stop = torch.arange(8.0), threading.Event()

    def assign_numbers() -> None:
        y = torch.zeros(4)
        while not stop.is_set():
            y[0] = 1.0

    others = [threading.Thread(target=assign_numbers, daemon=True) for _ in range(3)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in others:
            t.start()

        def step():
            for _ in range(300):
                x.clone()[x > 1] = x.max()  # a value on the GPU: nonzero, every time

        (row,) = syncs.census(step, torch.device("cpu"))
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        for t in others:
            t.join()
    assert row.count_per_step == 300
    began, release = threading.Barrier(2), threading.Event()

    def first() -> None:  # begins first, ends first
        syncs.census(lambda: (began.wait(), release.wait()), torch.device("cpu"))

    one = threading.Thread(target=first)
    one.start()
    second = threading.Thread(target=lambda: syncs.census(lambda: (began.wait(), one.join()), torch.device("cpu")))
    second.start()
    release.set()
    second.join()
    assert "__setitem__" not in vars(torch.Tensor)
