"""The rows the `mask` probe stores (its `layers` table), apart from probe.py: a sweep's driver unpickles them from
each job's outcome, and probe.py imports torch (~2 CPU-s a process that needs none of it)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerRow:
    layer: int
    layer_type: str
    kind: str
    """softmax (full or sliding attention: a mask), linear (linear attention: a recurrent state, no mask),
    or other (a layer type this probe does not analyse: named, never dropped)."""
    head_dim: int | None
    """This layer's real head_dim (Gemma-4: 512 on full layers, 256 on sliding ones); flash needs <= 256."""
    mask: str
    is_causal: bool
    fast_path: bool
    expected_backend: str
    """The SDPA backend torch's selection rules give for this call (no kernel runs here: expected, not
    observed; carrier and profile read the backend from the kernels that ran). Linear layers: the
    flash-linear-attention kernel where installed (carrier's `kernel_fallbacks` says which ran)."""
    window: int | None
    keys_min: int | None
    keys_max: int | None
    band_ok: bool
    cross_sequence: bool
    """A query sees another packed sequence: by the mask (softmax layers) or, with --padding packed, by the
    numbers (`packed_rel_diff` over LEAK_REL, every layer: a linear layer's state crossing a boundary)."""
    packed_rel_diff: float | None = None
    """--padding packed: max |packed - alone| / max |alone| of this layer's output on each sequence
    (probes.mask.leak); None otherwise."""
