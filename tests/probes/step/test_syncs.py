"""The sync census names each wait for the device by the line outside torch that made it, per step."""

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
