"""What the recorded forward runs (probes.step.masking.attention_calls), as a Config reads it: no torch here,
so a sweep's driver and `labprobe validate` check a plan's mask entries without importing torch (~2 CPU-s a
process)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

from probes.result import require


@dataclasses.dataclass(frozen=True, kw_only=True)
class ForwardConfig:
    """What the recorded forward runs: the checkpoint's config, the probe batch (its shape, padding and
    packing) and the attention settings the harness uses."""

    checkpoint: Path
    """Checkpoint directory holding config.json, or the config.json itself (no weights needed)."""
    seq_len: int = 4096
    """Tokens per row of the probe batch."""
    batch_size: int = 1
    """Rows in the probe batch."""
    padding: Literal["none", "right", "packed"] = "none"
    """none: every row full; right: rows shrink to half length, right-padded; packed: each row holds
    several sequences with restarting position_ids, as DataCollatorWithFlattening produces."""
    num_packed: int = 3
    """Sequences per row when --padding packed (unequal lengths: 1/2, 1/3, 1/6 of the row, ...)."""
    use_cache: bool | None = None
    """The use_cache keyword the harness passes to the forward; unset: what the config says."""
    attention_mask: bool | None = None
    """Whether the harness passes a 2D attention_mask; unset: as the collator would (yes for none and
    right, no for packed, whose collator returns position_ids only)."""
    attn_implementation: Literal["sdpa", "eager"] = "sdpa"
    """The attention implementation the training run uses."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """Training dtype: flash attention needs fp16/bf16."""

    def __post_init__(self) -> None:
        require(self.seq_len >= 2, "seq_len", f"must be >= 2, got {self.seq_len}")
        require(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        require(self.num_packed >= 1, "num_packed", f"must be >= 1, got {self.num_packed}")
        require(
            self.padding != "packed" or self.seq_len >= self.num_packed,
            "seq_len",
            f"`seq_len` {self.seq_len} cannot hold `num_packed` {self.num_packed} sequences",
        )
