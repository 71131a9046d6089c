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

import itertools
import math

import numpy as np

from probes.bucket.config import Config
from probes.corpus import buckets
from probes.corpus import lengths as corpus_mod
from probes.corpus.buckets import Outcome, SweepRow
from probes.corpus.padded import padded_in_order
from probes.result import Check, ProbeResult, require


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
    """Headline: the smallest bucket that wins 90% of the global sort's gain (probes.corpus.buckets)."""
    pick = buckets.pick_90pct(rows, random)
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
    sizes = buckets.bucket_sizes(config.batch_size, data.num_samples, config.bucket_sizes, config.num_sizes)
    rows, raw, random = buckets.sweep(
        data, batch_size=config.batch_size, max_length=config.max_length, seeds=config.seeds, sizes=sizes
    )
    clipped = np.minimum(data.length, config.max_length)
    return ProbeResult(
        probe="bucket",
        config=config,
        tables={"sweep": rows},
        summary=summary(rows, random, data),
        checks=checks(rows, raw, random, clipped, config),
    )
