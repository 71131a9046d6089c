"""A sweep's counts: each status counted by name, every outcome kept in order, no unknown status."""

from __future__ import annotations

import pytest

from runner.dispatch.loop import Counts
from runner.lab.plan import Job


def job(n: int) -> Job:
    return Job(
        plan="p",
        entry=0,
        probe="mask",
        checkpoint=f"c{n}",
        host="gx10",
        corpus=None,
        config={"seq_len": n},
        config_hash="h",
        gpu=False,
        paths={"checkpoint": "x"},
    )


def test_counts_count_each_status_and_keep_every_outcome():
    counts = Counts()
    counts.add(job(1), "ok", "")
    counts.add(job(2), "failed", "boom")
    counts.add(job(3), "skipped", "deadline")
    counts.add_done(job(4))
    assert (counts.ok, counts.failed, counts.skipped, counts.already_done) == (1, 1, 1, 1)
    assert counts.failures == [(job(2), "boom")]
    assert [(j.checkpoint, s) for j, s, _ in counts.outcomes] == [
        ("c1", "ok"),
        ("c2", "failed"),
        ("c3", "skipped"),
        ("c4", "already_done"),
    ]
    with pytest.raises(ValueError, match="unknown job status 'refused'"):
        counts.add(job(5), "refused", "")
