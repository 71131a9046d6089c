"""A corpus's batches under each batching strategy, in the order training feeds them.

Shared by `goodput` (the predicted time of an epoch) and `replay` (the same batches run through the
harness), and built from the batching the `padding` and `bucket` probes measure (probes.corpus.padded,
probes.corpus.buckets), so the three agree.
Samples are truncated to max_length first; seed s shuffles with `numpy.random.default_rng(s)
.permutation` (the shuffle `padding` and `bucket` use).

- `fixed`: the shuffle cut into batches of batch_size, every row padded to max_length.
- `longest`: the shuffle cut into batches, each padded to its longest sample.
- `sorted`: padding's optimum (the descending sort, the short batch where it pads least).
- `bucket`: bucket's LengthGroupedSampler order at bucket_size (batches never straddle buckets).
- `packed`: the samples concatenated into rows of max_length, batch_size rows a batch; only the
  last row has padding. A packed row is `masked`: restarting position_ids make the model's mask
  code build a block-diagonal mask, so it loses SDPA's maskless fast path as a padded batch does.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from probes.corpus import buckets
from probes.corpus import lengths as corpus
from probes.corpus.padded import optimum_batches
from probes.result import require

STRATEGIES = ("fixed", "longest", "sorted", "bucket", "packed")


@dataclasses.dataclass(frozen=True)
class Batches:
    strategy: str
    row_lengths: np.ndarray
    """Real tokens of every row, in the order the rows are fed."""
    starts: np.ndarray
    """Index into row_lengths of each batch's first row."""
    widths: np.ndarray
    """Each batch's padded width, tokens."""
    packed: bool = False

    @property
    def num_batches(self) -> int:
        return int(self.starts.size)

    @property
    def rows(self) -> np.ndarray:
        """Rows (sequences) in each batch."""
        return np.diff(np.r_[self.starts, self.row_lengths.size])

    @property
    def real_tokens(self) -> np.ndarray:
        """Real (non-padding) tokens of each batch."""
        return np.add.reduceat(self.row_lengths, self.starts)

    @property
    def masked(self) -> np.ndarray:
        """Whether each batch carries an explicit attention mask (padding, or packing)."""
        if self.packed:
            return np.ones(self.num_batches, dtype=bool)
        return self.real_tokens < self.rows * self.widths

    def batch(self, i: int) -> np.ndarray:
        """Row lengths of batch i."""
        end = self.starts[i + 1] if i + 1 < self.num_batches else self.row_lengths.size
        return self.row_lengths[self.starts[i] : end]


def _cut(strategy: str, ordered: np.ndarray, starts: np.ndarray) -> Batches:
    return Batches(strategy, ordered, starts, np.maximum.reduceat(ordered, starts))


def make(
    strategy: str,
    lengths: np.ndarray,
    *,
    batch_size: int,
    max_length: int,
    seed: int = 0,
    bucket_size: int | None = None,
) -> Batches:
    """The batches of one epoch; bucket_size is needed for `bucket` (and ignored otherwise)."""
    clipped = np.minimum(np.asarray(lengths, dtype=np.int64), max_length)
    n, b = clipped.size, batch_size
    perm = np.random.default_rng(seed).permutation(n)
    every_b = np.arange(0, n, b)
    if strategy == "fixed":
        return Batches(strategy, clipped[perm], every_b, np.full(every_b.size, max_length))
    if strategy == "longest":
        return _cut(strategy, clipped[perm], every_b)
    if strategy == "sorted":
        return _cut(strategy, *optimum_batches(clipped, b))
    if strategy == "bucket":
        assert bucket_size is not None, "bucket needs a bucket_size"
        size = min(bucket_size, n)
        ordered, _ = buckets.bucketed(clipped, np.zeros(n, dtype=np.int32), perm, size)
        ids = buckets.batch_ids(n, size, b)
        return _cut(strategy, ordered, np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]))
    if strategy == "packed":
        real = int(clipped.sum())
        num_rows = -(-real // max_length)
        rows = np.full(num_rows, max_length, dtype=np.int64)
        rows[-1] = real - max_length * (num_rows - 1)
        starts = np.arange(0, num_rows, b)
        return Batches(strategy, rows, starts, np.full(starts.size, max_length), packed=True)
    raise ValueError(f"unknown strategy {strategy!r} (known: {', '.join(STRATEGIES)})")


def packed_segments(lengths: np.ndarray, max_length: int) -> list[np.ndarray]:
    """The samples inside each row of `packed` (make's rows, in order): the samples truncated to max_length,
    concatenated and cut every max_length tokens, so a sample may end one row and begin the next (each
    piece is its own sequence there: positions restart). Sums of the pieces are make's row lengths."""
    clipped = np.minimum(np.asarray(lengths, dtype=np.int64), max_length)
    real = int(clipped.sum())
    cuts = np.union1d(np.cumsum(clipped), np.arange(max_length, real, max_length))  # sample and row ends
    starts = np.arange(0, real, max_length)
    first = np.searchsorted(cuts, starts, side="right")
    last = np.searchsorted(cuts, np.minimum(starts + max_length, real), side="right")
    return [np.diff(np.r_[start, cuts[a:b]]) for start, a, b in zip(starts, first, last)]


def bucket_size_for(config, data: corpus.Lengths) -> int | None:
    """A goodput or replay Config's bucket size: its `bucket_size`, or the bucket probe's 90%-gain size
    when `bucket` is among its strategies without one (refused when the corpus is a single batch)."""
    if "bucket" not in config.strategies or config.bucket_size is not None:
        return config.bucket_size
    require(
        data.num_samples > config.batch_size,
        "batch_size",
        f"{config.lengths or config.corpus}: "
        f"{data.num_samples} samples, bucketing needs more than `batch_size` {config.batch_size}",
    )
    return bucket_size_90pct(data.length, batch_size=config.batch_size, max_length=config.max_length)


def bucket_size_90pct(
    lengths: np.ndarray, *, batch_size: int, max_length: int, seeds: tuple[int, ...] = (0, 1, 2, 3)
) -> int:
    """The `bucket` probe's headline: the smallest bucket size winning 90% of the global sort's gain."""
    data = corpus.Lengths(
        length=np.asarray(lengths, dtype=np.int64),
        source_code=np.zeros(len(lengths), dtype=np.int32),
        sources=("all",),
        origin="given",
    )
    sizes = buckets.bucket_sizes(batch_size, data.num_samples)
    rows, _, random = buckets.sweep(data, batch_size=batch_size, max_length=max_length, seeds=seeds, sizes=sizes)
    return buckets.pick_90pct(rows, random).bucket_size
