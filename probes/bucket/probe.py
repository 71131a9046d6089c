"""`bucket`: what length bucketing wins over random batching, and what it costs in source diversity.

The algorithm is the one users run (the HF Trainer's length grouping, `LengthGroupedSampler`):
a seeded random permutation (seed s: `numpy.random.default_rng(s).permutation`), cut into
buckets of `bucket_size` samples, each bucket sorted by length descending (stable, so equal
lengths keep their shuffled order) and cut into batches of `batch_size`, each padded to its
longest sample. Samples are truncated to `--max-length` first. Sweeping `bucket_size` from the
batch size (random batching) to the whole corpus (a global descending sort cut into batches from
the start, the short batch last) shows the trade-off. That global sort is what the sampler yields,
not always the least padding possible (the `padding` probe's `sorted` row places the short batch
where it pads least).

Table `sweep`, one row per bucket size: `pad_fraction` (mean, std over seeds), `gain_vs_random`
(padded tokens of random batching over those of this size), `sources_per_batch` (mean distinct
sources per batch) and `source_entropy_ratio` (mean per-batch source entropy over the corpus's).

Checks: `sweep_varies` (the rows are not all identical, pad_fraction never rises with the bucket
size beyond seed noise, and every intermediate size pads strictly less than random batching and
strictly more than the global sort: a sweep that changes nothing, or whose buckets silently became
a global sort, is broken),
`random_at_batch_size` (bucket_size == batch_size matches plain random batching, computed apart,
within noise) and `global_sort_at_all` (the whole-corpus bucket pads exactly as a global descending
sort cut from the start, computed apart).
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np

from probes.bucket.config import Config
from probes.corpus import lengths as corpus_mod
from probes.corpus.padded import padded_in_order
from probes.result import Check, ProbeResult, require

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


def bucket_sizes(config: Config, num_samples: int) -> list[int]:
    b = config.batch_size
    if config.bucket_sizes:
        sizes = {min(s, num_samples) for s in config.bucket_sizes}
    else:
        # num_sizes - 1 geometric multiples of the batch size below the corpus, then the corpus
        multiples = np.geomspace(1, max(1.0, num_samples / b), config.num_sizes)[:-1]
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


def sweep(data: corpus_mod.Lengths, config: Config) -> tuple[list[SweepRow], dict[int, list[Outcome]], list[int]]:
    """Rows per bucket size, the raw outcomes, and random batching's padded tokens per seed."""
    clipped = np.minimum(data.length, config.max_length)
    n, k = clipped.size, len(data.sources)
    perms = [np.random.default_rng(s).permutation(n) for s in config.seeds]
    # Random batching, computed apart from the sweep: consecutive batches of the shuffle, no sort.
    random = [padded_in_order(clipped[p], config.batch_size) for p in perms]
    base_entropy = corpus_entropy(data.source_code, k)
    real = int(clipped.sum())
    rows, raw = [], {}
    for size in bucket_sizes(config, n):
        runs = [outcome(*bucketed(clipped, data.source_code, p, size), size, config.batch_size, k) for p in perms]
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


def varies(rows: list[SweepRow], num_seeds: int) -> tuple[bool, str]:
    """sweep_varies: distinct rows, pad_fraction non-increasing in the bucket size (up to 3 standard
    errors over the seeds: different sizes cut the same shuffle differently), and every intermediate
    size strictly between random batching (the first row) and the global sort (the last)."""
    # NaN (a single-source corpus has no entropy) compares unequal to itself: map it to None.
    values = {
        tuple(
            round(v, 12) if math.isfinite(v) else None
            for v in (r.pad_fraction, r.sources_per_batch, r.source_entropy_ratio)
        )
        for r in rows
    }
    if len(values) <= 1:
        return False, f"all {len(rows)} bucket sizes give identical outputs: the sweep changes nothing"

    def noise(a: SweepRow, b: SweepRow) -> float:
        return 3 * math.hypot(a.pad_fraction_std, b.pad_fraction_std) / math.sqrt(num_seeds) + 1e-12

    rises = [
        f"{a.bucket_size}->{b.bucket_size}"
        for a, b in itertools.pairwise(rows)
        if b.pad_fraction > a.pad_fraction + noise(a, b)
    ]
    first, last = rows[0].pad_fraction, rows[-1].pad_fraction
    outside = [r.bucket_size for r in rows[1:-1] if not last < r.pad_fraction < first]
    detail = f"{len(values)} distinct outcomes over {len(rows)} bucket sizes; pad_fraction " + ", ".join(
        f"{r.pad_fraction:.4g}" for r in rows
    )
    if rises:
        return False, f"pad_fraction rises with the bucket size at {rises}: {detail}"
    if outside:
        return False, (
            f"bucket sizes {outside} are not strictly between random batching ({first:.4g}) and "
            f"the global sort ({last:.4g}): {detail}"
        )
    return True, detail


def checks(
    rows: list[SweepRow], raw: dict[int, list[Outcome]], random: list[int], clipped: np.ndarray, config: Config
) -> list[Check]:
    ok_varies, varies_detail = varies(rows, len(config.seeds))
    first, whole = rows[0], rows[-1]
    real = int(clipped.sum())
    random_fractions = [p / (p + real) for p in random]
    noise = 3 * float(np.std(random_fractions)) / np.sqrt(len(random)) + 1e-12
    gap = abs(first.pad_fraction - float(np.mean(random_fractions)))
    agrees = bool(gap <= noise)
    # what the whole-corpus bucket should yield: descending, cut from the start (short batch last)
    global_sort = padded_in_order(np.sort(clipped)[::-1], config.batch_size)
    whole_padded = sorted({r.padded for r in raw[whole.bucket_size]})
    return [
        Check(name="sweep_varies", ok=ok_varies, detail=varies_detail),
        Check(
            name="random_at_batch_size",
            ok=agrees,
            detail=(
                f"bucket_size {first.bucket_size}: pad_fraction {first.pad_fraction:.6f} vs random batching "
                f"{np.mean(random_fractions):.6f} (|diff| {gap:.2e}, noise {noise:.2e})"
            ),
        ),
        Check(
            name="global_sort_at_all",
            ok=whole_padded == [global_sort],
            detail=(
                f"bucket_size {whole.bucket_size} (whole corpus) pads "
                + (
                    f"{whole_padded[0]:,} tokens on every seed"
                    if len(whole_padded) == 1
                    else f"{', '.join(f'{p:,}' for p in whole_padded)} tokens over the seeds"
                )
                + f", a global descending sort cut from the start {global_sort:,}"
            ),
        ),
    ]


def summary(rows: list[SweepRow], random: list[int], data: corpus_mod.Lengths) -> dict:
    """Headline: the smallest bucket that wins 90% of what the whole-corpus bucket (a global
    descending sort) wins over random batching."""
    base, best = float(np.mean(random)), rows[-1].padded_tokens
    pick = next((r for r in rows if base - r.padded_tokens >= 0.9 * (base - best)), rows[-1])
    return {
        "num_samples": data.num_samples,
        "num_sources": len(data.sources),
        "lengths_from": data.origin,
        "pad_fraction_random": round(rows[0].pad_fraction, 6),
        "pad_fraction_global_sort": round(rows[-1].pad_fraction, 6),
        "bucket_size_90pct_gain": pick.bucket_size,
        "its_pad_fraction": round(pick.pad_fraction, 6),
        "its_sources_per_batch": round(pick.sources_per_batch, 4),
        "its_source_entropy_ratio": round(pick.source_entropy_ratio, 4),
    }


def run(config: Config) -> ProbeResult:
    data = config.load_lengths()
    # With one batch or less there is nothing to bucket: every bucket size is the same single cut.
    require(
        len(data.length) > config.batch_size,
        "batch_size",
        f"{config.lengths or config.corpus}: {len(data.length)} samples, bucketing needs more than "
        f"`batch_size` {config.batch_size}",
    )
    rows, raw, random = sweep(data, config)
    clipped = np.minimum(data.length, config.max_length)
    return ProbeResult(
        probe="bucket",
        config=config,
        tables={"sweep": rows},
        summary=summary(rows, random, data),
        checks=checks(rows, raw, random, clipped, config),
    )
