"""`mask`: what each attention layer really receives, from the config alone (no weights, no GPU).

It runs the model's own forward, built from the checkpoint's config at reduced width (same layer
types, sliding window and attention implementation; random weights; CPU), through a recording
attention function registered in both `AttentionInterface` and `AttentionMaskInterface`. So it
sees exactly what this transformers version builds for these inputs and keyword arguments.

Settles, per layer (table `layers`, a row for every decoder layer whatever its type): whether the
attention call gets no mask (SDPA `is_causal` fast path) or an explicit tensor, whether it is
flash-eligible by torch's SDPA rules at that layer's own head_dim (Gemma-4: 512 on full layers), the
expected SDPA backend, the sliding band (keys a real query can see, `keys_min`/`keys_max`, against
`window`), and whether a query sees a key of another packed sequence. Linear-attention layers
(Qwen3.5's Gated DeltaNet) make no attention call: their row says so (a recurrent state, no mask);
other layer types are named, never dropped (probes/step/layer_types.py). With --padding packed, every
layer's output on each packed sequence is also compared with the same sequence alone
(probes/mask/leak.py, `packed_rel_diff`): a linear layer's state crossing a boundary shows there.

Checks: `band_matches_window` (sliding layers: each real query at in-sequence position p sees
exactly min(window, p + 1) keys), `no_cross_sequence`, `fast_path_kept` (with no padding, every
full-attention layer keeps the maskless fast path). Exit 1 when one fails: a pre-flight check.

This module reads the calls and holds the checks; the Config is in probes.mask.config, the probe
batch and the recorded forward in probes.mask.forward.
"""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import torch

from probes.mask import leak as mask_leak
from probes.mask.config import Config
from probes.mask.forward import Batch, Call, allowed_matrix, record_forward
from probes.result import Check, InputError, ProbeResult, require
from probes.step import layer_types

# load_text_config: models and carrier import it from here too
from probes.step.checkpoint import load_text_config

_HALF = {"bfloat16", "float16"}
_BYTES_PER_CELL = {"sdpa": 16, "eager": 32}
"""Peak memory per (row, query, key) cell of the probe batch: masks, the reduced model's attention
weights and the analysis all hold one or more of them. Measured on CPU (benchmarks/bench_mask_memory.py):
10-11 bytes with sdpa, 22 with eager, going from 4,096 to 8,192 tokens; rounded up for headroom."""
_FIXED_BYTES = 1 << 30
"""The reduced model, torch and transformers: about 0.2-0.3 GiB measured; rounded up."""


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
    (probes/mask/leak.py); None otherwise."""


def check_lengths(config: Config, text_config) -> None:
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
class Seen:
    keys_min: int
    keys_max: int
    band_ok: bool
    cross_sequence: bool


def analyse(allowed: torch.Tensor, batch: Batch, window: int | None) -> Seen:
    assert allowed.shape[-1] == allowed.shape[-2] == batch.real.shape[1], "kv must align with q"
    allowed = allowed.expand(batch.real.shape[0], -1, -1)
    keys = allowed.sum(-1)
    real_keys = keys[batch.real]
    expected = batch.position + 1
    if window is not None:
        expected = expected.clamp(max=window)
    other = batch.seq_id[:, :, None] != batch.seq_id[:, None, :]
    real_pair = batch.real[:, :, None] & batch.real[:, None, :]
    return Seen(
        keys_min=int(real_keys.min()),
        keys_max=int(real_keys.max()),
        band_ok=bool((keys == expected)[batch.real].all()),
        cross_sequence=bool((allowed & other & real_pair).any()),
    )


def flash_eligible(call: Call, config: Config, head_dim: int, num_heads: int, num_kv: int) -> bool:
    """Flash-eligible by torch's SDPA rules at the real widths; torch's own check where CUDA exists."""
    if config.attn_implementation != "sdpa" or call.mask is not None or not call.is_causal:
        return False
    if torch.cuda.is_available():
        return _torch_flash_check(config.dtype, head_dim, num_heads, num_kv)
    # sdp_utils.cpp: no explicit mask, fp16/bf16, head_dim <= 256, is_causal only with q == kv.
    return config.dtype in _HALF and head_dim <= 256 and call.q_len == call.kv_len


def _torch_flash_check(dtype: str, head_dim: int, num_heads: int, num_kv: int) -> bool:
    dt = getattr(torch, dtype)
    q = torch.empty(1, num_heads, 128, head_dim, device="cuda", dtype=dt)
    kv = torch.empty(1, num_kv, 128, head_dim, device="cuda", dtype=dt)
    params = torch.backends.cuda.SDPAParams(q, kv, kv, None, 0.0, True, num_heads != num_kv)
    return bool(torch.backends.cuda.can_use_flash_attention(params, False))


def expected_backend(call: Call, config: Config, fast_path: bool) -> str:
    if config.attn_implementation == "eager":
        return "eager"
    if fast_path:
        return "flash"  # on sm90 with a recent cuDNN, cuDNN's flash kernel may be picked first
    return "efficient" if call.mask is not None or config.dtype not in _HALF else "math"


def layer_rows(config: Config, text_config, calls: list[Call], batch: Batch) -> list[LayerRow]:
    """A row per decoder layer: the recorded attention call of a softmax layer, what a linear or other
    layer gets instead (no attention call is made there)."""
    by_layer = {call.layer: call for call in calls}
    seen_cache: dict[tuple, tuple[Any, Seen]] = {}
    rows = []
    for spec in layer_types.layer_specs(text_config):
        call = by_layer.get(spec.layer)
        if call is None:
            rows.append(_maskless_row(spec))
            continue
        # Layers of one type share one mask object: analyse each distinct mask once.
        key = (id(call.mask), call.is_causal, call.window)
        if key not in seen_cache:
            seen_cache[key] = (call.mask, analyse(allowed_matrix(call), batch, call.window))
        seen = seen_cache[key][1]
        fast = flash_eligible(call, config, spec.head_dim, spec.num_heads, spec.num_kv_heads)
        rows.append(
            LayerRow(
                layer=call.layer,
                layer_type=spec.layer_type,
                kind=spec.kind,
                head_dim=spec.head_dim,
                mask="none" if call.mask is None else "tensor",
                is_causal=call.is_causal,
                fast_path=fast,
                expected_backend=expected_backend(call, config, fast),
                window=call.window,
                keys_min=seen.keys_min,
                keys_max=seen.keys_max,
                band_ok=seen.band_ok,
                cross_sequence=seen.cross_sequence,
            )
        )
    return rows


def _maskless_row(spec: layer_types.LayerSpec) -> LayerRow:
    linear = spec.kind == "linear"
    return LayerRow(
        layer=spec.layer,
        layer_type=spec.layer_type,
        kind=spec.kind if linear else "other",
        head_dim=spec.linear_value_dim if linear else None,
        mask="none (recurrent state)" if linear else "none (no attention call)",
        is_causal=linear,
        fast_path=False,
        expected_backend="fla chunk_gated_delta_rule (torch reference without flash-linear-attention)"
        if linear
        else "not analysed",
        window=None,
        keys_min=None,
        keys_max=None,
        band_ok=True,
        cross_sequence=False,
    )


def with_leaks(rows: list[LayerRow], leaks: list[float]) -> list[LayerRow]:
    """The packed comparison's verdict on each layer (probes/mask/leak.py)."""
    return [
        dataclasses.replace(r, packed_rel_diff=d, cross_sequence=r.cross_sequence or d > mask_leak.LEAK_REL)
        for r, d in zip(rows, leaks, strict=True)
    ]


def checks(config: Config, rows: list[LayerRow]) -> list[Check]:
    sliding = [r for r in rows if r.window is not None]
    bad_band = [r.layer for r in sliding if not r.band_ok]
    leaks = [r.layer for r in rows if r.cross_sequence]
    full = [r for r in rows if r.kind == "softmax" and r.window is None]
    slow = [r.layer for r in full if not r.fast_path]
    out = [
        Check(
            name="band_matches_window",
            ok=not bad_band,
            detail=(
                f"layers {bad_band} see other than min(window, position+1) keys"
                if bad_band
                else f"{len(sliding)} sliding layers see min(window, position+1) keys"
                if sliding
                else "no sliding layers"
            ),
        ),
        Check(
            name="no_cross_sequence",
            ok=not leaks,
            detail=(
                f"layers {leaks} attend across packed sequences" + _leak_hint(config, rows)
                if leaks
                else "no query sees another sequence's keys"
            ),
        ),
    ]
    if config.padding == "none":
        out.append(
            Check(
                name="fast_path_kept",
                ok=not slow,
                detail=(
                    f"full-attention layers {slow} lose the is_causal fast path"
                    if slow
                    else f"all {len(full)} full-attention layers keep the is_causal fast path"
                ),
            )
        )
    else:
        out.append(
            Check(
                name="fast_path_kept",
                ok=True,
                detail=(
                    f"not applicable with --padding {config.padding}: the batch needs an explicit mask; "
                    f"{len(slow)} of {len(full)} full-attention layers get one"
                ),
            )
        )
    return out


def _leak_hint(config: Config, rows: list[LayerRow]) -> str:
    if config.padding != "packed":
        return ""
    hints = []
    linear = [r.layer for r in rows if r.cross_sequence and r.kind == "linear"]
    softmax = [r.layer for r in rows if r.cross_sequence and r.kind == "softmax"]
    other = [r.layer for r in rows if r.cross_sequence and r.kind == "other"]
    if softmax:
        hints.append(
            f"softmax layers {softmax}: packing is detected only with no attention_mask and no cache: "
            "pass use_cache=False and no all-ones attention_mask"
        )
    if linear:
        hints.append(
            f"linear-attention layers {linear} carry their recurrent state into the next sequence: position_ids "
            "do not reach them. Only the kernel's varlen path keeps sequences apart: cu_seq_lens_q/k in the "
            "forward's kwargs (DataCollatorWithFlattening(return_flash_attn_kwargs=True)) with "
            "flash-linear-attention on a CUDA device (without it transformers refuses them); even then the "
            "causal conv1d ignores the boundaries in transformers 5.25, so the first linear_conv_kernel_dim - 1 tokens of each "
            "sequence still see the previous one. Otherwise do not pack this model: pad, or bucket by length"
        )
    if other:
        hints.append(f"layers {other} of a type this probe does not analyse mix packed sequences")
    return " (" + "; ".join(hints) + ")"


def run(config: Config) -> ProbeResult:
    import transformers

    text_config = load_text_config(config.checkpoint)
    check_lengths(config, text_config)
    calls, batch = record_forward(config, text_config)
    if not calls:
        raise InputError(f"{config.checkpoint}: the model made no attention call")
    rows = layer_rows(config, text_config, calls, batch)
    use_cache = config.use_cache if config.use_cache is not None else bool(text_config.use_cache)
    if config.padding == "packed":
        leaks = mask_leak.layer_leaks(
            text_config, batch, attn_implementation=config.attn_implementation, use_cache=use_cache
        )
        rows = with_leaks(rows, leaks)
    summary = {
        "model_type": text_config.model_type,
        "num_layers": len(rows),
        "layer_types": dict(collections.Counter(r.layer_type for r in rows)),
        "layers_not_analysed": [r.layer for r in rows if r.kind == "other"],
        "layers_fast_path": sum(r.fast_path for r in rows),
        "layers_tensor_mask": sum(r.mask == "tensor" for r in rows),
        "layers_cross_sequence": sum(r.cross_sequence for r in rows),
        "use_cache": use_cache,
        "attention_mask_passed": "attention_mask" in batch.kwargs,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
    }
    return ProbeResult(
        probe="mask", config=config, tables={"layers": rows}, summary=summary, checks=checks(config, rows)
    )
