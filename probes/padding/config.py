"""The `padding` probe's Config: its fields, each documented under it, and the checks of their values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from probes.corpus.config import CorpusConfig
from probes.result import require


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(CorpusConfig):
    checkpoint: Path | None = None
    """Checkpoint directory (or a bare tokenizer.json): its tokenizer tokenizes --corpus; its
    config.json gives the vocabulary size for the CE table."""
    max_length: int = 4096
    """Tokens per row: longer samples are truncated; `fixed` pads to it; `packed` fills rows of it."""
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    """Seeds of the random shuffles behind `longest` (mean and std over them)."""
    num_bins: int = 16
    """Bins of the length histogram."""
    vocab_size: int | None = None
    """Vocabulary size for the CE table; unset: the checkpoint's config.json, else its tokenizer."""
    ce_budget_gib: float = 4.0
    """Memory one step's CE logits may take (bf16 logits + fp32 upcast live together), GiB."""
    ce_chunk_sizes: tuple[int, ...] = ()
    """Candidate CE chunk sizes, tokens; unset: powers of two from 256 below the step's tokens."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.seeds) >= 1, "seeds", "needs at least one seed")
        require(all(s >= 0 for s in self.seeds), "seeds", f"must all be >= 0, got {list(self.seeds)}")
        require(self.num_bins >= 1, "num_bins", f"must be >= 1, got {self.num_bins}")
        require(self.vocab_size is None or self.vocab_size >= 1, "vocab_size", f"must be >= 1, got {self.vocab_size}")
        require(self.ce_budget_gib > 0, "ce_budget_gib", f"must be > 0, got {self.ce_budget_gib}")
        require(all(c >= 1 for c in self.ce_chunk_sizes), "ce_chunk_sizes", "must all be >= 1")
