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
other layer types are named, never dropped (probes.step.train.layer_types). With --padding packed, every
layer's output on each packed sequence is also compared with the same sequence alone
(probes.mask.leak, `packed_rel_diff`): a linear layer's state crossing a boundary shows there.

Checks: `band_matches_window` (sliding layers: each real query at in-sequence position p sees
exactly min(window, p + 1) keys), `no_cross_sequence`, `fast_path_kept` (with no padding, every
full-attention layer keeps the maskless fast path). Exit 1 when one fails: a pre-flight check.

This module reads the calls and holds the checks; the probe batch and the recorded forward are the
step kit's (probes.step.masking.attention_calls), as are the fast path's rules (probes.step.masking.fast_path), which
`profile` reads too.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

import torch

from probes.mask import leak as mask_leak
from probes.mask.config import Config
from probes.mask.rows import LayerRow
from probes.result import Check, InputError, ProbeResult
from probes.step.masking.attention_calls import Batch, Call, allowed_matrix, check_lengths, record_forward
from probes.step.masking.fast_path import HALF_DTYPES, flash_eligible
from probes.step.train import layer_types
from probes.step.train.checkpoint import load_text_config


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


def expected_backend(config: Config, fast_path: bool, head_dim: int) -> str:
    """torch's SDPA order on a CUDA card: flash where eligible (on sm90 with a recent cuDNN, cuDNN's flash
    kernel may be picked first), then memory-efficient, which takes a mask and any head_dim aligned to 8
    (16-bit) or 4 (fp32) elements with no upper bound (sdp_utils.cpp), then math."""
    if config.attn_implementation == "eager":
        return "eager"
    if fast_path:
        return "flash"
    return "efficient" if head_dim % (8 if config.dtype in HALF_DTYPES else 4) == 0 else "math"


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
                expected_backend=expected_backend(config, fast, spec.head_dim),
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
    """The packed comparison's verdict on each layer (probes.mask.leak)."""
    return [
        dataclasses.replace(r, packed_rel_diff=d, cross_sequence=r.cross_sequence or d > mask_leak.LEAK_REL)
        for r, d in zip(rows, leaks, strict=True)
    ]


def checks(config: Config, rows: list[LayerRow]) -> list[Check]:
    sliding = [r for r in rows if r.window is not None]
    bad_band = [r.layer for r in sliding if not r.band_ok]
    leaks = [r.layer for r in rows if r.cross_sequence]
    full = [r for r in rows if r.kind == "softmax" and r.window is None]
    slow = [r.layer for r in full if r.mask != "none" or not r.is_causal]  # lost the maskless is_causal call
    no_flash = [r for r in full if r.layer not in slow and not r.fast_path]
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
    out.append(_fast_path_check(config, full, slow, no_flash))
    return out


def _fast_path_check(config: Config, full: list[LayerRow], slow: list[int], no_flash: list[LayerRow]) -> Check:
    """With no padding every full-attention layer should get no mask and is_causal (the fast path), in a
    16-bit dtype (flash takes no other). A layer that keeps it but whose head_dim flash cannot take
    (Gemma-4's 512) is said, not failed: that is the architecture, and no setting changes it."""
    if config.padding != "none":
        detail = (
            f"not applicable with --padding {config.padding}: the batch needs an explicit mask; "
            f"{len(slow)} of {len(full)} full-attention layers get one"
        )
        return Check(name="fast_path_kept", ok=True, detail=detail)
    if not full:
        return Check(name="fast_path_kept", ok=True, detail="no full-attention layers")
    if slow:
        detail = f"full-attention layers {slow} get an explicit mask: they lose the is_causal fast path"
    else:
        detail = f"all {len(full)} full-attention layers keep the is_causal fast path"
    if no_flash:
        dims = sorted({r.head_dim for r in no_flash})
        detail += (
            f"; layers {[r.layer for r in no_flash]} (head_dim {', '.join(map(str, dims))}, {config.dtype}) are not "
            f"flash-eligible (flash: 16-bit, head_dim <= 256): {no_flash[0].expected_backend} runs them"
        )
    by_dtype = bool(no_flash) and config.dtype not in HALF_DTYPES
    return Check(name="fast_path_kept", ok=not slow and not by_dtype, detail=detail)


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
            "do not reach them. Only the kernels' varlen paths keep sequences apart: cu_seq_lens_q/k for "
            "flash-linear-attention's chunked rule and seq_idx for causal-conv1d's convolution, both in the "
            "forward's kwargs (DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)), "
            "with both packages on a CUDA device (without them transformers refuses these kwargs). Otherwise do "
            "not pack this model: pad, or bucket by length"
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
        "torch": str(torch.__version__),  # a TorchVersion would import torch wherever it is unpickled
    }
    return ProbeResult(
        probe="mask", config=config, tables={"layers": rows}, summary=summary, checks=checks(config, rows)
    )
