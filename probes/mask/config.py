"""The `mask` probe's Config: a checkpoint and the probe batch its own forward is recorded on, with the
attention settings the harness uses; the fields, their docs and their checks are the recorded forward's
(probes.step.masking.forward_config.ForwardConfig, which `profile` reads the fast path with too)."""

from __future__ import annotations

import dataclasses

from probes.step.masking.forward_config import ForwardConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config(ForwardConfig):
    """The mask probe's options."""
