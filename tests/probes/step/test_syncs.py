"""The sync census names each wait for the device by the line outside torch that made it, per step."""

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from probes.step import syncs


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
        ("index by a boolean mask (nonzero)", "step/test_syncs.py"): 1,
        ("_local_scalar_dense", "step/test_syncs.py"): 1,
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
    ],
)
def test_the_ops_whose_output_size_or_value_the_host_needs_are_each_named(call, what):
    x = torch.tensor([1, 2, 2, 0, 3])
    assert [r.what for r in syncs.census(lambda: call(x), torch.device("cpu"))] == [what]


def test_ops_the_gpu_runs_without_the_host_are_not_waits():
    x = torch.tensor([1, 2, 2, 0, 3])
    step = lambda: (x.masked_fill(x > 1, 0), x.repeat_interleave(2, output_size=10), (x > 1).any(), x.sum())  # noqa: E731
    assert syncs.census(step, torch.device("cpu")) == []
