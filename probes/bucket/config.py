"""The `bucket` probe's Config: its fields, each documented under it, and the checks of their values."""

from __future__ import annotations

import dataclasses

from probes.corpus import buckets
from probes.corpus.config import CorpusConfig
from probes.result import require


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(CorpusConfig):
    bucket_sizes: tuple[int, ...] = ()
    """Bucket sizes to sweep, multiples of --batch-size; unset: --num-sizes sizes spaced geometrically
    from the batch size to the whole corpus. The batch size and the whole corpus are always swept."""
    num_sizes: int = buckets.NUM_SIZES
    """Bucket sizes in the default sweep."""
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    """Seeds of the random permutations (mean and std over them)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.num_sizes >= 2, "num_sizes", f"must be >= 2, got {self.num_sizes}")
        require(len(self.seeds) >= 1, "seeds", "needs at least one seed")
        require(all(s >= 0 for s in self.seeds), "seeds", f"must all be >= 0, got {list(self.seeds)}")
        bad = [s for s in self.bucket_sizes if s < 1 or s % self.batch_size]
        require(not bad, "bucket_sizes", f"must be multiples of `batch_size` {self.batch_size}, got {bad}")
