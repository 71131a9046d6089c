"""The `replay` probe's Config: its fields, each documented under it, and the checks of their values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from probes.corpus import batching
from probes.corpus import lengths as corpus_mod
from probes.result import require
from probes.step.config import StepConfig
from probes.step.variants import stacks


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(StepConfig):
    checkpoint: Path
    """Checkpoint directory with config.json (the model; also the tokenizer of --corpus)."""
    corpus: Path | None = None
    """Corpus, JSONL or Parquet: records with `messages` (chat turns) or `text`, optional `source`."""
    lengths: Path | None = None
    """Lengths file instead of a corpus (Parquet or CSV: `length`, optional `source`)."""
    batch_size: int = 8
    """Samples per batch."""
    max_length: int = 4096
    """Tokens per row: longer samples are truncated."""
    strategies: tuple[str, ...] = ("longest", "bucket")
    """Batching strategies to replay (longest, sorted, bucket, packed; not fixed: see __post_init__)."""
    bucket_size: int | None = None
    """Bucket size of `bucket`, a multiple of --batch-size; unset: the bucket probe's 90%-gain size."""
    seed: int = 0
    """Seed of the first epoch's shuffle (the next epochs take seed+1, seed+2, ...)."""
    num_steps: int = 200
    """Steps replayed per strategy."""
    warmup_steps: int = 3
    """Untimed steps of the widest batches before each strategy's replay."""
    profile: Path | None = None
    """A `labprobe probe profile --json` output to predict from; unset: a fit measured here first."""
    variant: str | None = None
    """A variant or stack (a --variant value of carrier and profile, e.g. bf16-adapters+fused-adamw) applied to
    every fitted and replayed step as the worker applies it; unset: the harness as it is."""
    stack_json: Path | None = None
    """With --profile and --variant: the carrier or profile --variant --json output goodput priced the stack
    with (rows of --checkpoint's model); the prediction is --profile's model scaled by its --variant step over
    its baseline's, as goodput's."""
    fit_lens: tuple[int, ...] = ()
    """Widths of the fit measured here (>= 3); unset: 8 widths spaced geometrically up to --max-length."""
    fit_steps: int = 5
    """Timed steps per fit width (extended up to 3x while the spread is above 2 percent)."""
    cache_dir: Path = corpus_mod.DEFAULT_CACHE_DIR
    """Where token lengths are cached, keyed by corpus and tokenizer content."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require((self.corpus is None) != (self.lengths is None), "corpus", "give exactly one of `corpus` and `lengths`")
        for name in ("batch_size", "max_length", "num_steps", "fit_steps"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.warmup_steps >= 0 and self.seed >= 0, "warmup_steps", "`warmup_steps` and `seed` must be >= 0")
        replayable = [s for s in batching.STRATEGIES if s != "fixed"]
        bad = [s for s in self.strategies if s not in replayable]
        require(
            bool(self.strategies) and not bad,
            "strategies",
            f"cannot replay {bad} ({', '.join(replayable)}; `fixed` pads every batch to --max-length, which "
            "goodput prices and replay does not build)",
        )
        require(
            self.bucket_size is None or (self.bucket_size >= 1 and self.bucket_size % self.batch_size == 0),
            "bucket_size",
            f"must be a multiple of `batch_size` {self.batch_size}, got {self.bucket_size}",
        )
        require(not self.fit_lens or len(set(self.fit_lens)) >= 3, "fit_lens", "needs >= 3 distinct widths")
        require(all(n >= 2 for n in self.fit_lens), "fit_lens", "must all be >= 2")
        if self.variant is not None:  # its canonical spelling, as carrier stores it and a sweep hashes it
            object.__setattr__(self, "variant", stacks.canonical(self.variant))
            stacks.get(self.variant)  # an unknown name or a conflicting stack: its FieldError, before anything runs
        require(
            self.stack_json is None or (self.variant is not None and self.profile is not None),
            "stack_json",
            "needs `variant` (the stack to replay) and `profile` (the model it scales, as goodput does)",
        )

    def widths(self) -> tuple[int, ...]:
        if self.fit_lens:
            return tuple(sorted(set(self.fit_lens)))
        grid = np.geomspace(max(2, self.max_length // 16), self.max_length, 8)
        return tuple(sorted({int(round(w)) for w in grid}))
