"""Length bucketing as users run it (the HF Trainer's `LengthGroupedSampler`), swept over bucket sizes:
the `bucket` probe's table and headline, and the bucket size `goodput` and `replay` batch with
(probes.corpus.batching). The `bucket` probe documents the algorithm and the table's columns.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from probes.corpus import lengths as corpus_mod
from probes.corpus.padded import padded_in_order

NUM_SIZES = 10
"""Bucket sizes in the default sweep."""
_DENSE_CELLS = 1 << 24  # batches x sources below which per-batch source counts use a dense bincount


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRow:
    bucket_size: int
    num_batches: int
    padded_tokens: int
    """Mean over seeds, rounded."""
    pad_fraction: float
    pad_fraction_std: float
    gain_vs_random: float
    sources_per_batch: float
    source_entropy_ratio: float


@dataclasses.dataclass(frozen=True)
class Outcome:
    """One (bucket size, seed) run."""

    padded: int
    num_batches: int
    sources_per_batch: float
    entropy: float  # mean per-batch source entropy, nats


def bucket_sizes(
    batch_size: int, num_samples: int, given: tuple[int, ...] = (), num_sizes: int = NUM_SIZES
) -> list[int]:
    """The sizes swept: `given` (capped at the corpus), else num_sizes spaced geometrically from the batch
    size to the whole corpus; the batch size and the whole corpus always."""
    b = batch_size
    if given:
        sizes = {min(s, num_samples) for s in given}
    else:
        # num_sizes - 1 geometric multiples of the batch size below the corpus, then the corpus
        multiples = np.geomspace(1, max(1.0, num_samples / b), num_sizes)[:-1]
        sizes = {min(int(round(m)) * b, num_samples) for m in multiples}
    return sorted(sizes | {min(b, num_samples), num_samples})


def bucketed(
    clipped: np.ndarray, codes: np.ndarray, perm: np.ndarray, bucket_size: int
) -> tuple[np.ndarray, np.ndarray]:
    """Lengths and source codes in the order the sampler yields them: each bucket sorted descending."""
    n = clipped.size
    shuffled = clipped[perm]
    # One integer key sorts by length descending and keeps the shuffled order among equals.
    key = (int(clipped.max()) - shuffled) * n + np.arange(n, dtype=np.int64)
    num_full = n // bucket_size
    key[: num_full * bucket_size].reshape(num_full, bucket_size).sort(axis=1)
    key[num_full * bucket_size :].sort()
    position = key % n
    return shuffled[position], codes[perm][position]


def batch_ids(n: int, bucket_size: int, batch_size: int) -> np.ndarray:
    """Batch of each position: batches never straddle two buckets."""
    j = np.arange(n, dtype=np.int64)
    per_bucket = -(-bucket_size // batch_size)
    return (j // bucket_size) * per_bucket + (j % bucket_size) // batch_size


def outcome(lengths: np.ndarray, codes: np.ndarray, bucket_size: int, batch_size: int, num_sources: int) -> Outcome:
    ids = batch_ids(lengths.size, bucket_size, batch_size)
    starts = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]])
    sizes = np.diff(np.r_[starts, lengths.size])
    padded = int((np.maximum.reduceat(lengths, starts) * sizes).sum() - lengths.sum())
    num_batches = starts.size
    cells = num_batches * num_sources
    if cells <= _DENSE_CELLS:
        counts = np.bincount(ids * num_sources + codes, minlength=cells)
        pairs = np.flatnonzero(counts)
        pair_batch, pair_count = pairs // num_sources, counts[pairs]
    else:
        pairs, pair_count = np.unique(ids * num_sources + codes, return_counts=True)
        pair_batch = pairs // num_sources
    share = pair_count / sizes[pair_batch]
    entropy = np.bincount(pair_batch, weights=-share * np.log(share), minlength=num_batches)
    distinct = np.bincount(pair_batch, minlength=num_batches)
    return Outcome(
        padded=padded, num_batches=num_batches, sources_per_batch=float(distinct.mean()), entropy=float(entropy.mean())
    )


def corpus_entropy(codes: np.ndarray, num_sources: int) -> float:
    share = np.bincount(codes, minlength=num_sources) / codes.size
    share = share[share > 0]
    return float(-(share * np.log(share)).sum())


def sweep(
    data: corpus_mod.Lengths, *, batch_size: int, max_length: int, seeds: tuple[int, ...], sizes: list[int]
) -> tuple[list[SweepRow], dict[int, list[Outcome]], list[int]]:
    """Rows per bucket size, the raw outcomes, and random batching's padded tokens per seed."""
    clipped = np.minimum(data.length, max_length)
    n, k = clipped.size, len(data.sources)
    perms = [np.random.default_rng(s).permutation(n) for s in seeds]
    # Random batching, computed apart from the sweep: consecutive batches of the shuffle, no sort.
    random = [padded_in_order(clipped[p], batch_size) for p in perms]
    base_entropy = corpus_entropy(data.source_code, k)
    real = int(clipped.sum())
    rows, raw = [], {}
    for size in sizes:
        runs = [outcome(*bucketed(clipped, data.source_code, p, size), size, batch_size, k) for p in perms]
        raw[size] = runs
        fractions = [r.padded / (r.padded + real) for r in runs]
        padded = float(np.mean([r.padded for r in runs]))
        rows.append(
            SweepRow(
                bucket_size=size,
                num_batches=runs[0].num_batches,
                padded_tokens=round(padded),
                pad_fraction=float(np.mean(fractions)),
                pad_fraction_std=float(np.std(fractions)),
                gain_vs_random=float(np.mean(random)) / padded if padded else float("inf"),
                sources_per_batch=float(np.mean([r.sources_per_batch for r in runs])),
                source_entropy_ratio=(
                    float(np.mean([r.entropy for r in runs])) / base_entropy if base_entropy else float("nan")
                ),
            )
        )
    return rows, raw, random


def pick_90pct(rows: list[SweepRow], random: list[int]) -> SweepRow:
    """The smallest bucket that wins 90% of what the whole-corpus bucket (a global descending sort) wins
    over random batching."""
    base, best = float(np.mean(random)), rows[-1].padded_tokens
    return next((r for r in rows if base - r.padded_tokens >= 0.9 * (base - best)), rows[-1])
