"""The `profile` probe's Config (probes.profile.probe documents the probe; its measurements, in
probes.profile.measure, read this Config too)."""

from __future__ import annotations

import dataclasses

from probes.result import require
from probes.step.config import StepConfig, VariantChoice


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(StepConfig, VariantChoice):
    seq_lens: tuple[int, ...] = (2048, 4096, 6144, 8192, 12288)
    """Sequence lengths of the scaling table (at least three; four GPU-bound ones for a held-out error)."""
    batch_size: int = 1
    """Sequences per step in the scaling table."""
    seq_len: int = 4096
    """The training run's sequence length: term shares, padding penalty, CE and kernels use it."""
    warmup_steps: int = 2
    """Untimed steps before each timing."""
    steps: int = 5
    """Timed steps per measurement (the window the statistics use)."""
    max_steps: int = 15
    """Cap on timed steps when the spread stays above 2 percent."""
    profile_steps: int = 3
    """Steps under torch.profiler for the kernel table (each scaling point gets one for gpu_busy_frac)."""
    variant: tuple[str, ...] = ()
    """Variants to measure at --batch-size x --seq-len, each in its own process (repeat --variant;
    probes.step.variants.catalog): baseline, bf16-autocast, bf16-adapters, fused-adamw, grad-ckpt, compile,
    ce-chunk=N. Tables `variants` and `whatif`, and the summary's advice."""
    processes: int = 2
    """Fresh processes the variants' baseline is measured in (the across-process spread)."""
    seed: int = 0
    """Seed of the random weights and batches of the variants' processes."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            len(set(self.seq_lens)) >= 3,
            "seq_lens",
            f"needs >= 3 distinct lengths (quadratic, linear and fixed terms), got {list(self.seq_lens)}",
        )
        require(min(self.seq_lens) >= 2 and self.seq_len >= 2, "seq_lens", "`seq_lens`/`seq_len` must be >= 2")
        for name in ("batch_size", "steps", "profile_steps", "processes"):
            require(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        require(self.warmup_steps >= 0, "warmup_steps", "must be >= 0")
        require(self.max_steps >= self.steps, "max_steps", f"`max_steps` {self.max_steps} < `steps` {self.steps}")
        self.resolve_variants()
