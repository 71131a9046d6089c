"""padding: every strategy recomputed here by plain loops over batches, on a hand-checkable lengths
file, a large generated one, and the real demo corpus tokenized with the demo tokenizer."""

from __future__ import annotations

import itertools
import json
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from lengths_util import write_lengths

from probes.padding import probe as padding
from runner.cli import main

ROOT = Path(__file__).resolve().parents[3]

# 7 samples, batch 3, max_length 8: the tail batch holds one sample, two samples are truncated.
SMALL = [5, 3, 9, 1, 7, 2, 12]
SMALL_SOURCES = ["a", "b", "a", "b", "c", "b", "a"]


def loop_padded(order, batch_size, max_length) -> int:
    """Padded tokens, one batch at a time: each batch padded to its longest (truncated) sample."""
    padded = 0
    for start in range(0, len(order), batch_size):
        batch = [min(x, max_length) for x in order[start : start + batch_size]]
        padded += sum(max(batch) - x for x in batch)
    return padded


def batches_padded(batches) -> int:
    return sum(max(batch) - x for batch in batches for x in batch)


def loop_optimum(lengths, batch_size, max_length) -> int:
    """Least padding over consecutive batches of the descending sort, trying every place for the
    short batch (test_sorted_is_the_optimum_over_every_ordering shows nothing else does better)."""
    ordered = sorted((min(x, max_length) for x in lengths), reverse=True)
    num_full, short = divmod(len(ordered), batch_size)
    best = None
    for k in range(num_full + 1 if short else 1):
        cut = k * batch_size
        head = [ordered[i : i + batch_size] for i in range(0, cut, batch_size)]
        rest = ordered[cut + short :]
        tail = [rest[i : i + batch_size] for i in range(0, len(rest), batch_size)]
        padded = batches_padded(head + ([ordered[cut : cut + short]] if short else []) + tail)
        best = padded if best is None else min(best, padded)
    return best


def expected_strategies(lengths, batch_size, max_length, seeds) -> dict[str, dict]:
    real = sum(min(x, max_length) for x in lengths)
    fixed = sum(max_length - min(x, max_length) for x in lengths)
    shuffled = []
    for seed in seeds:
        perm = np.random.default_rng(seed).permutation(len(lengths))  # the documented shuffle
        shuffled.append(loop_padded([lengths[i] for i in perm], batch_size, max_length))
    ordered = loop_optimum(lengths, batch_size, max_length)
    rows = math.ceil(real / max_length)  # the truncated samples, packed
    fractions = [p / (p + real) for p in shuffled]
    mean = sum(fractions) / len(fractions)
    return {
        "fixed": {"padded_tokens": fixed, "pad_fraction": fixed / (fixed + real), "real_tokens": real},
        "longest": {
            "padded_tokens": round(sum(shuffled) / len(shuffled)),
            "pad_fraction": mean,
            "pad_fraction_std": math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions)),
            "real_tokens": real,
        },
        "sorted": {"padded_tokens": ordered, "pad_fraction": ordered / (ordered + real), "real_tokens": real},
        "packed": {
            "padded_tokens": rows * max_length - real,
            "num_rows": rows,
            "real_tokens": real,
            "pad_fraction": (rows * max_length - real) / (rows * max_length),
        },
    }


def check_against_loops(result, lengths, batch_size, max_length, seeds):
    want = expected_strategies(lengths, batch_size, max_length, seeds)
    rows = {r.strategy: r for r in result.tables["strategies"]}
    assert list(rows) == ["fixed", "longest", "sorted", "packed"]
    for name, fields in want.items():
        for field, value in fields.items():
            assert getattr(rows[name], field) == pytest.approx(value, rel=1e-12, abs=1e-12), (name, field)
    over = [x for x in lengths if x > max_length]
    for name in ("fixed", "longest", "sorted", "packed"):
        assert rows[name].truncated_samples == len(over)
        assert rows[name].truncated_tokens == sum(x - max_length for x in over)
        assert rows[name].real_tokens + rows[name].truncated_tokens == sum(lengths)


def test_small_corpus_by_hand(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL, SMALL_SOURCES)
    result = padding.run(padding.Config(lengths=path, batch_size=3, max_length=8, seeds=(0, 1, 2)))
    check_against_loops(result, SMALL, 3, 8, (0, 1, 2))
    rows = {r.strategy: r for r in result.tables["strategies"]}
    # By hand: truncated lengths 5 3 8 1 7 2 8 (real 34); fixed pads 7*8-34 = 22.
    assert rows["fixed"].padded_tokens == 22 and rows["fixed"].real_tokens == 34
    # Sorted: the short batch in the middle, [8 8 7] [5] [3 2 1] -> 1 + 0 + 3 = 4 padded
    # (last, [8 8 7] [5 3 2] [1] pads 6; first, [8] [8 7 5] [3 2 1] pads 7).
    assert rows["sorted"].padded_tokens == 4
    # Packed: the 34 truncated tokens into rows of 8 -> 5 rows, 6 padded; all strategies count 34 real.
    assert rows["packed"].num_rows == 5 and rows["packed"].padded_tokens == 6
    assert {r.real_tokens for r in rows.values()} == {34}
    assert result.ok


def test_sorted_is_the_optimum_over_every_ordering():
    """Brute force: every ordering of tiny corpora cut into batches from the start (every split
    into batches is some ordering's); `sorted` must equal the least padding of them all."""
    rng = np.random.default_rng(0)
    cases = [([10, 1, 1], 2, 100), (SMALL, 3, 8)]
    cases += [(rng.integers(1, 12, int(rng.integers(1, 8))).tolist(), int(rng.integers(1, 5)), 9) for _ in range(60)]
    for lengths, batch_size, max_length in cases:
        best = min(loop_padded(list(order), batch_size, max_length) for order in itertools.permutations(lengths))
        config = padding.Config(lengths=Path("unused.parquet"), batch_size=batch_size, max_length=max_length)
        rows, _ = padding.strategy_rows(np.array(lengths, dtype=np.int64), config)
        assert {r.strategy: r for r in rows}["sorted"].padded_tokens == best, (lengths, batch_size)


def test_sorted_is_a_lower_bound_when_the_batch_does_not_divide(tmp_path, capsys):
    """10, 1, 1 in batches of 2: a descending sort cut from the start pads 9 ([10 1] [1]), but
    [1 1] [10] pads 0, and some shuffles find it; `sorted` must too, and the check must pass."""
    path = write_lengths(tmp_path / "l.parquet", [10, 1, 1])
    assert main(["probe", "padding", "--lengths", str(path), "--batch-size", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["strategy"]: r for r in out["tables"]["strategies"]}
    assert rows["sorted"]["padded_tokens"] == 0
    assert all(c["ok"] for c in out["checks"])


def test_lengths_table_overall_and_per_source(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL, SMALL_SOURCES)
    result = padding.run(padding.Config(lengths=path, batch_size=3, max_length=8))
    rows = {r.source: r for r in result.tables["lengths"]}
    assert list(rows) == ["all", "a", "b", "c"]
    for source, row in rows.items():
        values = sorted(x for x, s in zip(SMALL, SMALL_SOURCES) if source in ("all", s))
        assert row.count == len(values) and row.total_tokens == sum(values) and row.max == values[-1]
        assert row.mean == pytest.approx(sum(values) / len(values))
        assert row.over_max_length == sum(x > 8 for x in values)
        for q, got in ((50, row.p50), (90, row.p90), (99, row.p99), (99.9, row.p99_9)):
            rank = (len(values) - 1) * q / 100  # linear interpolation between closest ranks
            lo, hi = math.floor(rank), math.ceil(rank)
            assert got == pytest.approx(values[lo] + (values[hi] - values[lo]) * (rank - lo))
    assert rows["all"].p50 == 5  # sorted 1 2 3 5 7 9 12


def test_histogram_counts_every_sample_once(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    result = padding.run(padding.Config(lengths=path, max_length=8, num_bins=4))
    bins = result.tables["histogram"]
    # max 12 over 4 bins: width 3 -> [1,3] [4,6] [7,9] [10,12]
    assert [(b.lo_tokens, b.hi_tokens) for b in bins] == [(1, 3), (4, 6), (7, 9), (10, 12)]
    assert [b.count for b in bins] == [
        sum(lo <= x <= hi for x in SMALL) for lo, hi in [(1, 3), (4, 6), (7, 9), (10, 12)]
    ]
    assert bins[-1].cumulative_fraction == pytest.approx(1.0)


def test_ce_chunks_from_vocab_size(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    result = padding.run(
        padding.Config(lengths=path, batch_size=2, max_length=8192, vocab_size=151936, ce_budget_gib=4.0)
    )
    rows = result.tables["ce_chunks"]
    full = rows[0]
    assert full.kind == "full" and full.chunk_tokens == 16384 and full.num_chunks == 1
    # Qwen3 at 16,384 tokens, full logits are 4.6 GiB bf16 and 9.3 GiB fp32
    assert full.logits_bf16_bytes / 2**30 == pytest.approx(4.64, abs=0.01)
    assert full.logits_fp32_bytes / 2**30 == pytest.approx(9.27, abs=0.01)
    chunks = [r.chunk_tokens for r in rows[1:]]
    assert chunks == [256, 512, 1024, 2048, 4096, 8192]
    # the reference CE's measured model: 12 bytes a logit unchunked, 14 a chunk's logit (no hidden
    # size without a checkpoint, so no hidden-gradient term)
    for r in rows:
        peak = r.chunk_tokens * 151936 * (12 if r.kind == "full" else 14)
        assert r.peak_bytes == peak and r.fits_budget == (peak <= 4 * 2**30)
    largest = max(c for c in chunks if c * 151936 * 14 <= 4 * 2**30)
    assert result.summary["ce_largest_chunk_tokens"] == largest == 1024


def cpu_ce_peak_bytes(tokens: int, vocab: int, hidden: int, chunk: int) -> int:
    """The reference CE's peak allocation over its inputs on the CPU, forward and backward, read
    from torch.profiler's memory events (the allocator's running total), not from padding's model."""
    from torch.profiler import ProfilerActivity, profile

    from probes.step.harness import cross_entropy

    generator = torch.Generator().manual_seed(0)
    h = torch.randn(tokens, hidden, dtype=torch.bfloat16, generator=generator, requires_grad=True)
    w = torch.randn(vocab, hidden, dtype=torch.bfloat16, generator=generator)
    y = torch.randint(0, vocab, (tokens,), generator=generator)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        cross_entropy(h, w, y, chunk).backward()
    trace = Path(tempfile.mkdtemp()) / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = [
        e["args"]
        for e in json.loads(trace.read_text())["traceEvents"]
        if e.get("name") == "[memory]" and e["args"].get("Device Type") == 0
    ]
    start = events[0]["Total Allocated"] - events[0]["Bytes"]
    return max(e["Total Allocated"] for e in events) - start


def test_ce_memory_model_matches_the_measured_reference_and_its_chunk_fits(tmp_path):
    """A budget of 40 MB at 2,048 tokens, vocab 4,096, hidden 64: the old 6-bytes-a-logit model
    recommended 1,024-token chunks, which really peak at ~59 MB. (Hidden 64, not 256: a bf16 matmul on a CPU
    runs at ~1 GFLOP/s; the peak is the logits', and the width's term, 4 bytes x tokens x hidden, is under 2% of it.)"""
    tokens, vocab, hidden = 2048, 4096, 64
    config = tmp_path / "ckpt"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"vocab_size": vocab, "hidden_size": hidden}))
    budget = 40e6
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    result = padding.run(
        padding.Config(lengths=path, checkpoint=config, batch_size=1, max_length=tokens, ce_budget_gib=budget / 2**30)
    )
    chunk = result.summary["ce_largest_chunk_tokens"]
    assert chunk == 512
    rows = {r.chunk_tokens: r for r in result.tables["ce_chunks"]}
    measured = {size: cpu_ce_peak_bytes(tokens, vocab, hidden, size) for size in (chunk, tokens)}
    for size, peak in measured.items():
        assert peak == pytest.approx(rows[size].peak_bytes, rel=0.10)
    assert measured[chunk] <= budget


def test_ce_vocab_from_the_gemma_checkpoint_and_skipped_without_one(tmp_path):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    gemma = ROOT / "demo" / "checkpoints" / "gemma-3-4b"
    result = padding.run(padding.Config(lengths=path, checkpoint=gemma, max_length=1024, batch_size=1))
    assert result.summary["vocab_size"] == 262208  # the real config's, not the demo tokenizer's
    assert result.tables["ce_chunks"][0].logits_bf16_bytes == 1024 * 262208 * 2
    bare = padding.run(padding.Config(lengths=path))
    assert "ce_chunks" not in bare.tables and "skipped" in bare.summary["ce_chunks"]


def test_large_generated_corpus(tmp_path):
    rng = np.random.default_rng(7)
    lengths = np.concatenate([rng.lognormal(5, 0.5, 30_000), rng.lognormal(7, 1.0, 10_000)])
    lengths = np.maximum(1, lengths.astype(np.int64))
    path = write_lengths(tmp_path / "big.parquet", lengths.tolist())
    result = padding.run(padding.Config(lengths=path, batch_size=16, max_length=2048, seeds=(3, 4)))
    check_against_loops(result, lengths.tolist(), 16, 2048, (3, 4))
    assert result.ok


def test_demo_corpus_through_the_cli_json(tmp_path, demo_json):
    out = demo_json("padding", "qwen3-0.6b-base", "--max-length", "2048")
    assert out["probe"] == "padding" and out["config"]["max_length"] == 2048
    assert set(out["tables"]) == {"strategies", "lengths", "histogram", "ce_chunks"}
    assert all({"name", "ok", "detail"} == set(c) for c in out["checks"])
    sources = {r["source"] for r in out["tables"]["lengths"]}
    assert sources == {"all", "qa", "chat", "code", "books"}
    means = {r["source"]: r["mean"] for r in out["tables"]["lengths"]}
    assert means["qa"] < means["chat"] < means["code"] < means["books"]  # distinct distributions
    # the same lengths, through the corpus module, give the same strategies by loops
    from probes.corpus import lengths as corpus

    data = corpus.load(
        corpus=ROOT / "demo" / "corpus.jsonl",
        lengths=None,
        cache_dir=tmp_path,
        checkpoint=ROOT / "demo" / "checkpoints" / "qwen3-0.6b-base",
    )
    assert data.origin == "cache"
    want = expected_strategies(data.length.tolist(), 8, 2048, (0, 1, 2, 3))
    got = {r["strategy"]: r for r in out["tables"]["strategies"]}
    assert got["sorted"]["padded_tokens"] == want["sorted"]["padded_tokens"]
    assert got["longest"]["pad_fraction"] == pytest.approx(want["longest"]["pad_fraction"])


def test_bad_cli_values_exit_2(tmp_path, capsys):
    path = write_lengths(tmp_path / "l.parquet", SMALL)
    for args, needle in (
        (["--batch-size", "0"], "--batch-size"),
        (["--max-length", "-1"], "--max-length"),
        (["--ce-budget-gib", "0"], "--ce-budget-gib"),
        (["--vocab-size", "0"], "--vocab-size"),
        (["--seeds", "0", "-1"], "--seed must all be >= 0"),
    ):
        assert main(["probe", "padding", "--lengths", str(path), *args]) == 2
        err = capsys.readouterr().err
        assert needle in err and len(err.strip().splitlines()) == 1
