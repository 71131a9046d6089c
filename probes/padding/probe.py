"""`padding`: how much of each step is padding, per batching strategy, from the corpus alone.

Input: a corpus tokenized with the checkpoint's own tokenizer (lengths cached), or a lengths file.
Every sample is first truncated to `--max-length`; real tokens count after truncation and
`pad_fraction = padded / (padded + real)`.

Tables:
- `strategies`, one row per batching strategy: `fixed` (every sample padded to max_length),
  `longest` (seeded random batches, each padded to its longest sample; mean and std over seeds),
  `sorted` (the least padding any batching can reach: consecutive batches of one global length
  sort, the short batch, when batch_size does not divide the sample count, placed where it pads
  least; so the lower bound of `longest`), `packed` (the truncated samples concatenated into rows
  of max_length; only the last row is padded).
- `lengths`: count, mean, p50, p90, p99, p99.9, max in tokens, overall (`all`) and per source.
- `histogram`: samples per length bin (tokens, inclusive bounds).
- `ce_chunks`: one step's cross-entropy memory (tokens = batch_size x max_length) for the full step
  and each candidate chunk size, and whether each fits `--ce-budget-gib`. `logits_bf16_bytes` and
  `logits_fp32_bytes` are the logits alone; `peak_bytes` is what the reference CE (probes.step.harness,
  forward and backward) really peaks at over its inputs, from a measured model: `bytes_per_logit` 12
  unchunked (bf16 logits, their fp32 upcast, the log-softmax) and 14 chunked (fp32 logits, softmax,
  its scaled gradient and the gradient's bf16 copy), plus, chunked, 4 bytes per token x hidden size
  (the bf16 hidden-state gradient held over the step and its scaled copy in the backward; the hidden
  size from config.json, left out when unknown). Measured on the CPU (tests/probes/padding/test_padding.py)
  and on an H200 (benchmarks/RESULTS.md). Omitted when the vocabulary size is unknown.

Checks: `sorted_is_lower_bound` (no random shuffle pads less than `sorted`) and
`tokens_accounted` (each strategy's real + truncated tokens equal the corpus's tokens, and real +
padded tokens fill exactly the rows it feeds).
Seed s shuffles with `numpy.random.default_rng(s).permutation`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from probes.corpus import lengths as corpus_mod
from probes.corpus.padded import optimum_batches, padded_batches, padded_in_order
from probes.padding.config import Config
from probes.result import Check, ProbeResult

_GIB = 1 << 30
BYTES_PER_LOGIT_FULL = 12
"""Peak bytes a logit of the reference CE unchunked: bf16 logits 2 + fp32 upcast 4 + log-softmax 4, and
the gradient's fp32/bf16 buffers in the backward (measured 11.9-12.1 on CPU and H200)."""
BYTES_PER_LOGIT_CHUNKED = 14
"""Peak bytes a logit of one chunk of the reference chunked CE: fp32 logits 4 + softmax 4 + its scaled
gradient 4 + that gradient in bf16 2 (measured 13.9-14.1)."""
BYTES_PER_HIDDEN_CHUNKED = 4
"""Chunked CE, bytes per token x hidden: the bf16 hidden gradient built in the forward and its copy
scaled in the backward."""
_PERCENTILES = (50, 90, 99, 99.9)


@dataclasses.dataclass(frozen=True, kw_only=True)
class StrategyRow:
    strategy: str
    batch_size: int
    max_length: int
    num_samples: int
    num_rows: int
    """Rows (sequences) the epoch feeds the model."""
    real_tokens: int
    padded_tokens: int
    """For `longest`: the mean over seeds, rounded."""
    pad_fraction: float
    pad_fraction_std: float
    truncated_samples: int
    truncated_tokens: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class LengthRow:
    source: str
    count: int
    total_tokens: int
    mean: float
    p50: float
    p90: float
    p99: float
    p99_9: float
    max: int
    over_max_length: int


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramRow:
    lo_tokens: int
    hi_tokens: int
    count: int
    fraction: float
    cumulative_fraction: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class CeChunkRow:
    kind: str
    chunk_tokens: int
    num_chunks: int
    logits_bf16_bytes: int
    logits_fp32_bytes: int
    bytes_per_logit: int
    peak_bytes: int
    """The reference CE's peak over its inputs, forward and backward (the measured model above)."""
    fits_budget: bool


def padded_optimum(lengths: np.ndarray, batch_size: int) -> int:
    """The least padding over every split into batches of batch_size (optimum_batches)."""
    return padded_batches(*optimum_batches(lengths, batch_size))


def _row(
    strategy: str, config: Config, lengths: np.ndarray, clipped: np.ndarray, num_rows: int, padded: list[int]
) -> StrategyRow:
    real = int(clipped.sum())
    fractions = [p / (p + real) if p + real else 0.0 for p in padded]
    return StrategyRow(
        strategy=strategy,
        batch_size=config.batch_size,
        max_length=config.max_length,
        num_samples=int(lengths.size),
        num_rows=num_rows,
        real_tokens=real,
        padded_tokens=round(float(np.mean(padded))),
        pad_fraction=float(np.mean(fractions)),
        pad_fraction_std=float(np.std(fractions)),
        truncated_samples=int((lengths > config.max_length).sum()),
        truncated_tokens=int(lengths.sum()) - real,
    )


def strategy_rows(lengths: np.ndarray, config: Config) -> tuple[list[StrategyRow], list[int]]:
    """The four strategies' rows, and `longest`'s padded tokens per seed."""
    clipped = np.minimum(lengths, config.max_length)
    n, b, width = lengths.size, config.batch_size, config.max_length
    longest = [padded_in_order(clipped[np.random.default_rng(s).permutation(n)], b) for s in config.seeds]
    real = int(clipped.sum())
    num_packed_rows = -(-real // width)
    return [
        _row("fixed", config, lengths, clipped, n, [n * width - real]),
        _row("longest", config, lengths, clipped, n, longest),
        _row("sorted", config, lengths, clipped, n, [padded_optimum(clipped, b)]),
        _row("packed", config, lengths, clipped, num_packed_rows, [num_packed_rows * width - real]),
    ], longest


def _length_row(source: str, lengths: np.ndarray, max_length: int) -> LengthRow:
    p50, p90, p99, p999 = np.percentile(lengths, _PERCENTILES)
    return LengthRow(
        source=source,
        count=int(lengths.size),
        total_tokens=int(lengths.sum()),
        mean=float(lengths.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        p99_9=float(p999),
        max=int(lengths.max()),
        over_max_length=int((lengths > max_length).sum()),
    )


def length_rows(data: corpus_mod.Lengths, max_length: int) -> list[LengthRow]:
    rows = [_length_row("all", data.length, max_length)]
    if len(data.sources) > 1:
        order = np.argsort(data.source_code, kind="stable")
        bounds = np.searchsorted(data.source_code[order], np.arange(len(data.sources) + 1))
        for code, name in enumerate(data.sources):
            part = data.length[order[bounds[code] : bounds[code + 1]]]
            if part.size:
                rows.append(_length_row(name, part, max_length))
    return rows


def histogram_rows(lengths: np.ndarray, num_bins: int) -> list[HistogramRow]:
    """Bins of equal integer width covering 1..max: bin k holds lengths in [k*w + 1, (k+1)*w]."""
    width = max(1, -(-int(lengths.max()) // num_bins))
    counts = np.bincount((lengths - 1) // width, minlength=num_bins)
    cumulative = np.cumsum(counts) / lengths.size
    return [
        HistogramRow(
            lo_tokens=k * width + 1,
            hi_tokens=(k + 1) * width,
            count=int(c),
            fraction=float(c / lengths.size),
            cumulative_fraction=float(cumulative[k]),
        )
        for k, c in enumerate(counts)
    ]


def ce_peak_bytes(tokens: int, chunk: int, vocab_size: int, hidden_size: int | None) -> int:
    """The reference CE's peak over its inputs for one step of `tokens`, chunk tokens at a time
    (chunk >= tokens: unchunked, as probes.step.harness falls back)."""
    if chunk >= tokens:
        return BYTES_PER_LOGIT_FULL * tokens * vocab_size
    return BYTES_PER_LOGIT_CHUNKED * chunk * vocab_size + BYTES_PER_HIDDEN_CHUNKED * tokens * (hidden_size or 0)


def ce_rows(
    tokens_per_step: int,
    vocab_size: int,
    budget_gib: float,
    candidates: tuple[int, ...],
    hidden_size: int | None = None,
) -> list[CeChunkRow]:
    if not candidates:
        candidates = tuple(1 << k for k in range(8, 31) if (1 << k) < tokens_per_step)
    rows = []
    budget = budget_gib * _GIB
    for kind, chunk in [("full", tokens_per_step)] + [("chunk", c) for c in sorted(set(candidates))]:
        chunk = min(chunk, tokens_per_step)
        peak = ce_peak_bytes(tokens_per_step, chunk, vocab_size, hidden_size)
        per_logit = BYTES_PER_LOGIT_FULL if chunk >= tokens_per_step else BYTES_PER_LOGIT_CHUNKED
        rows.append(
            CeChunkRow(
                kind=kind,
                chunk_tokens=chunk,
                num_chunks=-(-tokens_per_step // chunk),
                logits_bf16_bytes=chunk * vocab_size * 2,
                logits_fp32_bytes=chunk * vocab_size * 4,
                bytes_per_logit=per_logit,
                peak_bytes=peak,
                fits_budget=peak <= budget,
            )
        )
    return rows


def recommended_chunk(rows: list[CeChunkRow]) -> int:
    """The largest chunk whose modelled peak fits the budget (0: none does)."""
    return max((r.chunk_tokens for r in rows if r.fits_budget), default=0)


def checks(rows: list[StrategyRow], longest: list[int], lengths: np.ndarray, config: Config) -> list[Check]:
    by = {r.strategy: r for r in rows}
    best = min(longest)
    lower = by["sorted"].padded_tokens <= best
    n, total = lengths.size, int(lengths.sum())
    widths = {"fixed": n * config.max_length, "packed": by["packed"].num_rows * config.max_length}
    bad = [
        r.strategy
        for r in rows
        if r.real_tokens + r.truncated_tokens != total
        or (r.strategy in widths and r.real_tokens + r.padded_tokens != widths[r.strategy])
    ]
    return [
        Check(
            name="sorted_is_lower_bound",
            ok=lower,
            detail=(
                f"sorted (the optimum) pads {by['sorted'].padded_tokens:,} tokens, the best of "
                f"{len(config.seeds)} shuffles {best:,}"
            ),
        ),
        Check(
            name="tokens_accounted",
            ok=not bad,
            detail=(
                f"strategies {bad} lose or invent tokens"
                if bad
                else f"every strategy accounts for all {total:,} tokens"
            ),
        ),
    ]


def run(config: Config) -> ProbeResult:
    data = config.load_lengths()
    rows, longest = strategy_rows(data.length, config)
    tables: dict[str, list] = {
        "strategies": rows,
        "lengths": length_rows(data, config.max_length),
        "histogram": histogram_rows(data.length, config.num_bins),
    }
    vocab = config.vocab_size or corpus_mod.vocab_size(config.checkpoint)
    tokens_per_step = config.batch_size * config.max_length
    summary = {
        "num_samples": data.num_samples,
        "total_tokens": int(data.length.sum()),
        "num_sources": len(data.sources),
        "lengths_from": data.origin,
    }
    summary.update({f"pad_fraction_{r.strategy}": round(r.pad_fraction, 6) for r in rows})
    summary["truncated_samples"] = rows[0].truncated_samples
    if vocab is not None:
        hidden = corpus_mod.hidden_size(config.checkpoint)
        ce = ce_rows(tokens_per_step, vocab, config.ce_budget_gib, config.ce_chunk_sizes, hidden)
        tables["ce_chunks"] = ce
        summary.update(
            {
                "vocab_size": vocab,
                "hidden_size": hidden,
                "tokens_per_step": tokens_per_step,
                "ce_largest_chunk_tokens": recommended_chunk(ce),
            }
        )
    else:
        summary["ce_chunks"] = "skipped: no vocabulary size (give --vocab-size or --checkpoint)"
    return ProbeResult(
        probe="padding",
        config=config,
        tables=tables,
        summary=summary,
        checks=checks(rows, longest, data.length, config),
    )
