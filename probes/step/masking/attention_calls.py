"""The recorded forward: a probe batch (full, right-padded or packed rows) and every attention call the
model's own forward makes on it, built from the checkpoint's config at reduced width and recorded by
an attention function registered in both `AttentionInterface` and `AttentionMaskInterface`. The
`mask` probe reads the calls layer by layer; `profile` asks whether they keep the fast path
(probes.step.masking.fast_path)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import torch

from probes.result import require
from probes.step.masking.forward_config import ForwardConfig
from probes.step.train.layer_types import tiny_config

_RECORDER = "labprobe_record"
_BYTES_PER_CELL = {"sdpa": 16, "eager": 32}
"""Peak memory per (row, query, key) cell of the probe batch: masks, the reduced model's attention
weights and the analysis all hold one or more of them. Measured on CPU (benchmarks/bench_mask_memory.py):
10-11 bytes with sdpa, 22 with eager, going from 4,096 to 8,192 tokens; rounded up for headroom."""
_FIXED_BYTES = 1 << 30
"""The reduced model, torch and transformers: about 0.2-0.3 GiB measured; rounded up."""


def check_lengths(config: ForwardConfig, text_config) -> None:
    """Refuse a batch the model cannot take or this machine cannot hold, before allocating any of it."""
    limit = getattr(text_config, "max_position_embeddings", None)
    require(
        limit is None or config.seq_len <= limit,
        "seq_len",
        f"`seq_len` {config.seq_len} is over the model's max_position_embeddings {limit} ({config.checkpoint})",
    )
    cells = config.batch_size * config.seq_len * config.seq_len
    need = cells * _BYTES_PER_CELL[config.attn_implementation] + _FIXED_BYTES
    free = available_bytes()
    require(
        free is None or need <= free,
        "seq_len",
        f"`seq_len` {config.seq_len} x `batch_size` {config.batch_size} needs about {need / 2**30:.1f} GiB "
        f"(the probe holds (row, query, key) masks); {(free or 0) / 2**30:.1f} GiB is available here",
    )


def available_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, within the cgroup's limit; None if unknown."""
    free = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                free = int(line.split()[1]) * 1024
    except OSError:
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        used = int(Path("/sys/fs/cgroup/memory.current").read_text())
        if limit != "max" and free is not None:
            free = min(free, int(limit) - used)
    except (OSError, ValueError):
        pass
    return free


@dataclasses.dataclass(frozen=True)
class Batch:
    kwargs: dict[str, Any]
    real: torch.Tensor  # (b, s) bool: a real token, not padding
    seq_id: torch.Tensor  # (b, s) int: which packed sequence a token belongs to (-1: padding)
    position: torch.Tensor  # (b, s) int: position within its own sequence


def _row_lengths(config: ForwardConfig) -> list[int]:
    if config.padding != "right":
        return [config.seq_len] * config.batch_size
    half = config.seq_len // 2
    if config.batch_size == 1:
        return [half]
    step = (config.seq_len - half) / (config.batch_size - 1)
    return [config.seq_len - round(i * step) for i in range(config.batch_size)]


def _packed_lengths(seq_len: int, num: int) -> list[int]:
    """Unequal parts (1/2, 1/3, ... of what is left) so a leak cannot hide behind symmetry."""
    parts, left = [], seq_len
    for i in range(num - 1):
        part = max(1, min(left - (num - 1 - i), left // 2))
        parts.append(part)
        left -= part
    return parts + [left]


def build_batch(config: ForwardConfig, vocab_size: int) -> Batch:
    b, s = config.batch_size, config.seq_len
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(1, vocab_size, (b, s), generator=generator)
    position = torch.arange(s).expand(b, s).clone()
    seq_id = torch.zeros(b, s, dtype=torch.long)
    lengths = _row_lengths(config)
    real = torch.arange(s).expand(b, s) < torch.tensor(lengths)[:, None]
    if config.padding == "packed":
        starts = 0
        for i, n in enumerate(_packed_lengths(s, config.num_packed)):
            position[:, starts : starts + n] = torch.arange(n)
            seq_id[:, starts : starts + n] = i
            starts += n
    seq_id[~real] = -1
    kwargs: dict[str, Any] = {"input_ids": input_ids}
    pass_mask = config.attention_mask if config.attention_mask is not None else config.padding != "packed"
    if pass_mask:
        kwargs["attention_mask"] = real.long()
    if config.padding == "packed":
        kwargs["position_ids"] = position
    return Batch(kwargs=kwargs, real=real, seq_id=seq_id, position=position)


@dataclasses.dataclass
class Call:
    layer: int
    window: int | None
    mask: torch.Tensor | None
    is_causal: bool
    q_len: int
    kv_len: int


def _recorder(calls: list[Call], inner):
    """An attention function that notes what the layer receives, then runs the real one."""

    checked: dict[tuple, tuple[torch.Tensor | None, torch.Tensor]] = {}

    def record(module, query, key, value, attention_mask, **kwargs):
        is_causal = kwargs.get("is_causal")
        is_causal = getattr(module, "is_causal", True) if is_causal is None else is_causal
        q_len, kv_len = query.shape[2], key.shape[2]
        calls.append(
            Call(
                layer=module.layer_idx,
                window=getattr(module, "sliding_window", None),
                mask=attention_mask,
                q_len=q_len,
                kv_len=kv_len,
                # exactly the expression sdpa_attention_forward passes to torch
                is_causal=bool(q_len > 1 and attention_mask is None and is_causal),
            )
        )
        # Run the real attention once per distinct mask (proof that it accepts what it gets);
        # later layers reuse its output: values never feed back into the masks, which are built
        # once per forward, and skipping 30 quadratic CPU attentions keeps the probe at seconds.
        # head_dim too: Gemma-4's full layers have twice the sliding layers' width
        cache_key = (id(attention_mask), q_len, kv_len, query.shape[1], query.shape[-1])
        if cache_key not in checked:
            checked[cache_key] = (attention_mask, inner(module, query, key, value, attention_mask, **kwargs)[0])
        return checked[cache_key][1], None

    return record


def record_forward(config: ForwardConfig, text_config) -> tuple[list[Call], Batch]:
    """Run the reduced-width model's own forward and return every attention call, in order."""
    from transformers import AttentionInterface, AutoModelForCausalLM
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    calls: list[Call] = []
    impl = config.attn_implementation
    inner = ALL_ATTENTION_FUNCTIONS[impl] if impl != "eager" else None
    if inner is None:  # eager is each model's own function, not in the global table
        inner = _eager_of(text_config)
    AttentionInterface.register(_RECORDER, _recorder(calls, inner))
    # Without this second registration, padding masks silently arrive as None (docs/measurement.md).
    AttentionMaskInterface.register(_RECORDER, ALL_MASK_ATTENTION_FUNCTIONS[impl])
    # Reduced width: masks do not depend on widths, only on layer types, window and inputs.
    tiny = tiny_config(text_config)
    tiny._attn_implementation = _RECORDER
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny, attn_implementation=_RECORDER)
    model.train()  # as in training; the mask code also looks at the cache, not at the mode
    _skip_linear_mixers(model)
    batch = build_batch(config, tiny.vocab_size)
    use_cache = config.use_cache if config.use_cache is not None else bool(text_config.use_cache)
    with torch.no_grad():
        model(**batch.kwargs, use_cache=use_cache)
    return calls, batch


def _skip_linear_mixers(model) -> None:
    """Linear-attention mixers (Qwen3.5/Qwen3-Next `linear_attn`) make no attention call and no mask is
    built for them, and their torch reference kernel is a Python loop over 64-token chunks (about a
    second a layer at 4,096 tokens even at this width): the recording forward replaces their output by
    zeros. What they do to packed sequences is measured by a real forward (probes.mask.leak)."""
    for layer in model.get_decoder().layers:
        mixer = getattr(layer, "linear_attn", None)
        if mixer is not None:
            mixer.forward = lambda hidden_states, *args, **kwargs: torch.zeros_like(hidden_states)


def _eager_of(text_config):
    import importlib

    module = importlib.import_module(
        f"transformers.models.{text_config.model_type.replace('_text', '')}"
        f".modeling_{text_config.model_type.replace('_text', '')}"
    )
    return module.eager_attention_forward


def allowed_matrix(call: Call) -> torch.Tensor:
    """(batch, q, kv) bool: which keys each query attends to, whatever the mask's form."""
    if call.mask is None:
        if not call.is_causal:
            return torch.ones(1, call.q_len, call.kv_len, dtype=torch.bool)
        return torch.ones(call.q_len, call.kv_len, dtype=torch.bool).tril(call.kv_len - call.q_len)[None]
    mask = call.mask
    allowed = mask if mask.dtype == torch.bool else mask > torch.finfo(mask.dtype).min / 2
    return allowed.any(dim=1)  # over the head dimension (1 or heads)
