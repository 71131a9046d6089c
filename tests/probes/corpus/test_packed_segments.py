"""The sequences inside each packed row (what `replay` gives the model as restarting positions) are the
corpus's samples, truncated, concatenated and cut every max_length, exactly the rows goodput prices."""

import numpy as np
import pytest

from probes.corpus import batching


@pytest.mark.parametrize("max_length", [5, 16, 50, 400])
def test_pieces_end_where_a_sample_or_a_row_ends_and_sum_to_the_packed_rows(max_length):
    lengths = np.random.default_rng(max_length).integers(1, 60, 41)
    pieces = batching.packed_segments(lengths, max_length)
    rows = batching.make("packed", lengths, batch_size=3, max_length=max_length).row_lengths
    assert [int(p.sum()) for p in pieces] == rows.tolist()
    assert all(p.min() >= 1 for p in pieces)
    sample_ends = set(np.cumsum(np.minimum(lengths, max_length)).tolist())
    row_ends = set(np.cumsum(rows).tolist())
    assert set(np.cumsum(np.concatenate(pieces)).tolist()) == sample_ends | row_ends


def test_a_row_holding_whole_samples_is_those_samples():
    pieces = batching.packed_segments(np.array([3, 4, 9, 2]), 7)
    assert [p.tolist() for p in pieces] == [[3, 4], [7], [2]]  # the 9, truncated to 7, fills a row
    pieces = batching.packed_segments(np.array([3, 6, 2]), 4)
    assert [p.tolist() for p in pieces] == [[3, 1], [3, 1], [1]]  # the 6 (truncated to 4) and the 2 straddle rows
