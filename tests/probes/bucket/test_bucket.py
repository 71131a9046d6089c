"""bucket: the sampler recomputed here by plain loops (shuffle, buckets, stable descending sort,
batches), on a hand-checkable corpus and a large generated one; and broken sweeps that the
checks must catch."""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from lengths_util import write_lengths

from probes.bucket import probe as bucket
from probes.corpus import buckets
from runner.cli import main

ROOT = Path(__file__).resolve().parents[3]

SMALL = [5, 3, 9, 1, 7, 2, 12, 4, 4, 6, 8, 1]
SMALL_SOURCES = ["a", "b", "a", "b", "c", "b", "a", "c", "c", "a", "b", "a"]


def entropy(counts) -> float:
    total = sum(counts)
    return -sum(c / total * math.log(c / total) for c in counts if c)


def loop_sampler(lengths, sources, seed, bucket_size, batch_size, max_length):
    """LengthGroupedSampler, one sample at a time: returns the batches as (length, source) lists."""
    perm = np.random.default_rng(seed).permutation(len(lengths)).tolist()
    batches = []
    for start in range(0, len(perm), bucket_size):
        chunk = perm[start : start + bucket_size]
        chunk = sorted(chunk, key=lambda i: min(lengths[i], max_length), reverse=True)  # stable
        for b in range(0, len(chunk), batch_size):
            batches.append([(min(lengths[i], max_length), sources[i]) for i in chunk[b : b + batch_size]])
    return batches


def loop_row(lengths, sources, seeds, bucket_size, batch_size, max_length):
    real = sum(min(x, max_length) for x in lengths)
    corpus_h = entropy(Counter(sources).values())
    padded, fractions, distinct, ratio = [], [], [], []
    for seed in seeds:
        batches = loop_sampler(lengths, sources, seed, bucket_size, batch_size, max_length)
        p = sum(max(x for x, _ in batch) - x for batch in batches for x, _ in batch)
        padded.append(p)
        fractions.append(p / (p + real))
        distinct.append(sum(len({s for _, s in batch}) for batch in batches) / len(batches))
        ratio.append(sum(entropy(Counter(s for _, s in batch).values()) for batch in batches) / len(batches) / corpus_h)
    random = []
    for seed in seeds:  # random batching: consecutive batches of the shuffle
        perm = np.random.default_rng(seed).permutation(len(lengths)).tolist()
        batches = [perm[i : i + batch_size] for i in range(0, len(perm), batch_size)]
        random.append(
            sum(max(min(lengths[i], max_length) for i in b) - min(lengths[j], max_length) for b in batches for j in b)
        )
    mean = sum(fractions) / len(fractions)
    return {
        "padded_tokens": round(sum(padded) / len(padded)),
        "pad_fraction": mean,
        "pad_fraction_std": math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions)),
        "gain_vs_random": (sum(random) / len(random)) / (sum(padded) / len(padded)),
        "sources_per_batch": sum(distinct) / len(distinct),
        "source_entropy_ratio": sum(ratio) / len(ratio),
        "num_batches": len(loop_sampler(lengths, sources, seeds[0], bucket_size, batch_size, max_length)),
    }


def check_rows(result, lengths, sources, seeds, batch_size, max_length):
    for row in result.tables["sweep"]:
        want = loop_row(lengths, sources, seeds, row.bucket_size, batch_size, max_length)
        for field, value in want.items():
            assert getattr(row, field) == pytest.approx(value, rel=1e-9), (row.bucket_size, field)


def test_small_corpus_by_loops(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL, SMALL_SOURCES)
    result = bucket.run(bucket.Config(lengths=path, batch_size=2, max_length=8, bucket_sizes=(4, 6), seeds=(0, 1, 2)))
    assert [r.bucket_size for r in result.tables["sweep"]] == [2, 4, 6, 12]  # batch size, corpus added
    check_rows(result, SMALL, SMALL_SOURCES, (0, 1, 2), 2, 8)
    # By hand, the whole corpus sorted (truncated): 8 8 8 7 6 5 4 4 3 2 1 1 -> pads 0+1+1+0+1+0 = 3
    assert result.tables["sweep"][-1].padded_tokens == 3
    assert result.ok, result.checks


def test_whole_corpus_bucket_that_the_batch_does_not_divide(tmp_path):
    """12 samples in batches of 5: only the whole-corpus bucket can be a non-multiple of the batch
    (--bucket-sizes must be multiples); it ends with a batch of 2, and batches never straddle."""
    path = write_lengths(tmp_path / "l.parquet", SMALL, SMALL_SOURCES)
    result = bucket.run(bucket.Config(lengths=path, batch_size=5, max_length=8, bucket_sizes=(10,), seeds=(5, 6)))
    assert [r.bucket_size for r in result.tables["sweep"]] == [5, 10, 12]
    check_rows(result, SMALL, SMALL_SOURCES, (5, 6), 5, 8)
    # By hand, truncated and sorted descending, cut from the start: [8 8 8 7 6] [5 4 4 3 2] [1 1]
    # pads (0+0+0+1+2) + (0+1+1+2+3) + 0 = 10 on every seed, 3 batches.
    whole = result.tables["sweep"][-1]
    assert whole.padded_tokens == 10 and whole.num_batches == 3
    assert result.ok, result.checks
    # batch_ids itself, bucket 6 with batch 4: each bucket ends with a batch of 2
    assert buckets.batch_ids(12, 6, 4).tolist() == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3]


def test_whole_corpus_bucket_is_the_descending_sort_not_the_optimum(tmp_path):
    """10, 1, 1 in batches of 2: the sampler yields [10 1] [1] (pads 9), although [1 1] [10] pads 0;
    global_sort_at_all compares against what the sampler yields, and passes."""
    path = write_lengths(tmp_path / "l.parquet", [10, 1, 1], ["a", "b", "a"])
    result = bucket.run(bucket.Config(lengths=path, batch_size=2, seeds=(0, 1, 2)))
    assert result.tables["sweep"][-1].bucket_size == 3 and result.tables["sweep"][-1].padded_tokens == 9
    assert {c.name: c.ok for c in result.checks}["global_sort_at_all"]


def test_default_sweep_is_ten_sizes_from_batch_to_corpus():
    config = bucket.Config(lengths=Path("x.csv"), batch_size=8)
    sizes = buckets.bucket_sizes(config.batch_size, 1_000_000, config.bucket_sizes, config.num_sizes)
    assert len(sizes) == 10 and sizes[0] == 8 and sizes[-1] == 1_000_000
    assert all(s % 8 == 0 for s in sizes[:-1]) and sizes == sorted(set(sizes))


def test_large_generated_corpus(tmp_path):
    rng = np.random.default_rng(11)
    parts = [
        (rng.lognormal(4, 0.4, 6000), "short"),
        (rng.lognormal(6, 0.8, 3000), "long"),
        (rng.lognormal(5, 0.2, 3000), "mid"),
    ]
    lengths = np.maximum(1, np.concatenate([p for p, _ in parts]).astype(np.int64)).tolist()
    sources = [name for p, name in parts for _ in range(p.size)]
    path = write_lengths(tmp_path / "big.parquet", lengths, sources)
    result = bucket.run(bucket.Config(lengths=path, batch_size=8, max_length=1024, num_sizes=5, seeds=(0, 1)))
    check_rows(result, lengths, sources, (0, 1), 8, 1024)
    rows = result.tables["sweep"]
    assert rows[0].pad_fraction > rows[-1].pad_fraction and rows[0].gain_vs_random == pytest.approx(1.0)
    assert result.ok


@pytest.fixture
def demo_lengths(tmp_path) -> Path:
    rng = np.random.default_rng(3)
    lengths = np.concatenate([rng.integers(10, 60, 400), rng.integers(200, 2000, 400)])
    sources = ["qa"] * 400 + ["books"] * 400
    return write_lengths(tmp_path / "l.parquet", lengths.tolist(), sources)


def test_a_sweep_that_always_sorts_globally_fails_its_checks(demo_lengths, monkeypatch):
    """The regression the design warns of: re-sorting everything makes every bucket size a global sort."""
    real = buckets.bucketed
    monkeypatch.setattr(
        buckets, "bucketed", lambda lengths, codes, perm, size: real(lengths, codes, perm, lengths.size)
    )
    result = bucket.run(bucket.Config(lengths=demo_lengths, batch_size=8))
    failed = {c.name for c in result.checks if not c.ok}
    assert failed == {"sweep_varies", "random_at_batch_size"}


def test_a_sweep_that_never_sorts_fails_global_sort_at_all(demo_lengths, monkeypatch):
    monkeypatch.setattr(buckets, "bucketed", lambda lengths, codes, perm, size: (lengths[perm], codes[perm]))
    result = bucket.run(bucket.Config(lengths=demo_lengths, batch_size=8))
    failed = {c.name for c in result.checks if not c.ok}
    assert "global_sort_at_all" in failed and "sweep_varies" in failed


def test_a_corpus_of_equal_lengths_and_one_source_cannot_vary(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", [7] * 64)
    assert main(["probe", "bucket", "--lengths", str(path)]) == 1
    assert "[FAIL] sweep_varies" in capsys.readouterr().out


def test_demo_corpus_through_the_cli_json(demo_json):
    out = demo_json("bucket", "gemma-3-4b", "--max-length", "2048")
    assert [c["name"] for c in out["checks"]] == ["sweep_varies", "random_at_batch_size", "global_sort_at_all"]
    rows = out["tables"]["sweep"]
    assert len(rows) == 10 and rows[0]["bucket_size"] == 8 and rows[-1]["bucket_size"] == 1300
    # bucketing trades padding for source diversity on the demo's four distinct sources
    assert rows[-1]["pad_fraction"] < rows[0]["pad_fraction"] / 10
    assert rows[-1]["source_entropy_ratio"] < rows[0]["source_entropy_ratio"]


def test_negative_seed_is_one_line_exit_2(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    assert main(["probe", "bucket", "--lengths", str(path), "--seeds", "-1"]) == 2
    err = capsys.readouterr().err
    assert "--seed must all be >= 0" in err and len(err.strip().splitlines()) == 1


def test_bucket_sizes_must_be_multiples_of_the_batch(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    assert main(["probe", "bucket", "--lengths", str(path), "--batch-size", "4", "--bucket-sizes", "6"]) == 2
    err = capsys.readouterr().err
    assert "--bucket-sizes must be multiples of --batch-size 4" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("num_samples", [2, 8])
def test_a_corpus_of_one_batch_or_less_is_bad_input(tmp_path, capsys, num_samples):
    path = tmp_path / "lengths.csv"
    path.write_text("length\n" + "".join(f"{n}\n" for n in range(1, num_samples + 1)))
    assert main(["probe", "bucket", "--lengths", str(path), "--batch-size", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert str(path) in err and f"{num_samples} samples" in err and "--batch-size 8" in err and "\n" not in err


def test_buckets_larger_than_the_batch_sorting_globally_fail_sweep_varies(monkeypatch, demo_json):
    """The partial form of the bucketing bug: random batching stays right at bucket_size ==
    batch_size, but every larger bucket re-sorts the whole corpus, so the sweep reads [random, then
    the global sort at every size]. Two distinct outcomes used to pass sweep_varies."""
    real = buckets.bucketed
    monkeypatch.setattr(
        buckets,
        "bucketed",
        lambda lengths, codes, perm, size: real(lengths, codes, perm, size if size <= 8 else lengths.size),
    )
    out = demo_json("bucket", "qwen3-0.6b-base", "--max-length", "2048", exit_code=1)
    fractions = [round(r["pad_fraction"], 4) for r in out["tables"]["sweep"]]
    assert fractions[0] > 0.6 and len(set(fractions[1:])) == 1 and len(fractions) == 10
    failed = {c["name"]: c["detail"] for c in out["checks"] if not c["ok"]}
    assert set(failed) == {"sweep_varies"} and "not strictly between" in failed["sweep_varies"]


@pytest.mark.parametrize("num_seeds", [1, 4])
def test_a_sweep_whose_padding_rises_with_the_bucket_size_fails(demo_lengths, monkeypatch, num_seeds):
    """Buckets that grow worse with their size (here: the sizes' results in reverse) are broken too."""
    real = buckets.bucketed
    sizes = buckets.bucket_sizes(8, 800)
    mirror = dict(zip(sizes[1:-1], sizes[-2:0:-1]))
    monkeypatch.setattr(
        buckets, "bucketed", lambda lengths, codes, perm, size: real(lengths, codes, perm, mirror.get(size, size))
    )
    result = bucket.run(bucket.Config(lengths=demo_lengths, batch_size=8, seeds=tuple(range(num_seeds))))
    detail = {c.name: c.detail for c in result.checks if not c.ok}
    assert "rises with the bucket size" in detail["sweep_varies"]


def test_the_real_sweep_passes_sweep_varies_on_generated_corpora(tmp_path):
    for seed in range(3):
        rng = np.random.default_rng(seed)
        lengths = np.minimum(rng.lognormal(5.5, 1.0, 3000).astype(int) + 1, 8192)
        result = bucket.run(
            bucket.Config(
                lengths=write_lengths(tmp_path / f"{seed}.parquet", lengths.tolist()), batch_size=8, max_length=4096
            )
        )
        assert result.ok, [c for c in result.checks if not c.ok]
