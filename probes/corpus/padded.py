"""Padded tokens of a split of a corpus's lengths into batches, each padded to its longest sample: the
arithmetic the padding and bucket probes and the batching strategies all price with."""

from __future__ import annotations

import numpy as np


def padded_in_order(lengths: np.ndarray, batch_size: int) -> int:
    """Padded tokens when consecutive samples form batches, each padded to its longest sample."""
    n = lengths.size
    num_full = n // batch_size
    full = lengths[: num_full * batch_size].reshape(num_full, batch_size)
    width = int(full.max(axis=1).sum()) * batch_size if num_full else 0
    tail = lengths[num_full * batch_size :]
    width += int(tail.max()) * tail.size if tail.size else 0
    return width - int(lengths.sum())


def optimum_batches(lengths: np.ndarray, batch_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(lengths in order, batch start indices) of a split into batches of batch_size (one short batch
    of n mod batch_size when it does not divide n) with the least padding. Some optimum takes
    consecutive runs of the descending sort (swapping a longer sample into the batch with the larger
    maximum never adds padding), so only the short batch's place is free: k full batches, the short
    one, then the rest; k is chosen in closed form over every place."""
    ordered = np.sort(lengths)[::-1]
    n, b = ordered.size, batch_size
    num_full, short = divmod(n, b)
    if short == 0:
        return ordered, np.arange(0, n, b)
    # short batch after k full batches: heads ordered[j*b] for j < k, ordered[k*b] for the short
    # batch, then ordered[short + j*b] for j >= k.
    before = np.concatenate([[0], np.cumsum(ordered[0 : num_full * b : b])])
    after = np.concatenate([np.cumsum(ordered[short::b][::-1])[::-1], [0]])
    width = b * before + short * ordered[0 : num_full * b + 1 : b] + b * after
    k = int(np.argmin(width))
    starts = np.concatenate([np.arange(0, k * b + 1, b), np.arange(k * b + short, n, b)])
    return ordered, np.unique(starts[starts < n])


def padded_batches(ordered: np.ndarray, starts: np.ndarray) -> int:
    """Padded tokens when ordered[starts[i]:starts[i+1]] form the batches, each padded to its longest."""
    sizes = np.diff(np.r_[starts, ordered.size])
    return int((np.maximum.reduceat(ordered, starts) * sizes).sum() - ordered.sum())
