"""The fields every corpus probe (padding, bucket, goodput) shares: where the lengths come from, the
batch shape, the length cache. A probe's Config inherits them; it redeclares a field only to say more
of it (the field keeps its place and its default)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probes.corpus import lengths as corpus_mod
from probes.result import require


@dataclasses.dataclass(frozen=True, kw_only=True)
class CorpusConfig:
    checkpoint: Path | None = None
    """Checkpoint directory (or a bare tokenizer.json) whose tokenizer tokenizes --corpus."""
    corpus: Path | None = None
    """Corpus, JSONL or Parquet: records with `messages` (chat turns) or `text`, optional `source`."""
    lengths: Path | None = None
    """Lengths file instead of a corpus (Parquet or CSV: `length`, optional `source`)."""
    batch_size: int = 8
    """Samples per batch."""
    max_length: int = 4096
    """Tokens per row: longer samples are truncated before batching."""
    cache_dir: Path = corpus_mod.DEFAULT_CACHE_DIR
    """Where token lengths are cached, keyed by corpus and tokenizer content."""

    def __post_init__(self) -> None:
        corpus_mod.validate_inputs(corpus=self.corpus, lengths=self.lengths, checkpoint=self.checkpoint)
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.max_length >= 1, "max_length", f"must be >= 1, got {self.max_length}")

    def load_lengths(self) -> corpus_mod.Lengths:
        """The corpus's token lengths (cached), or the lengths file's."""
        return corpus_mod.load(
            corpus=self.corpus, lengths=self.lengths, checkpoint=self.checkpoint, cache_dir=self.cache_dir
        )
