"""Packed sequences, checked by their numbers: each sequence of a packed row against the same sequence alone.

A mask tells what softmax attention may see, but a linear-attention layer (Gated DeltaNet) has no mask:
it carries a recurrent state (and a causal convolution's last few tokens) along the row, and only a
varlen kernel told where each sequence starts resets them. So the `mask` probe also runs the reduced
model's real forward (sdpa or eager, fp32) once on the packed row and once on each of its sequences
alone, and compares every layer's output on that sequence. Each layer is fed, in the lone run, exactly
the input it got in the packed run (a forward pre-hook), so a layer's difference is its own leak,
not one inherited from the layers before it.

A layer leaks when max |packed - alone| over a sequence exceeds `LEAK_REL` x max |alone|: with fp32
weights, a layer that keeps sequences apart differs by rounding only (dense Qwen3: about 1e-7 of the
output), one that does not by 1e-3 to 1e-1 (Qwen3.5's linear layers).
"""

from __future__ import annotations

import torch

from probes.step.masking.attention_calls import Batch
from probes.step.train.layer_types import tiny_config

LEAK_REL = 1e-4


def _decoder_layers(model) -> torch.nn.ModuleList:
    return model.get_decoder().layers


def _spans(batch: Batch) -> list[tuple[int, int]]:
    """(start, length) of each real sequence of the first row."""
    seq_id = batch.seq_id[0]
    spans = []
    for sid in sorted(set(seq_id.tolist()) - {-1}):
        where = (seq_id == sid).nonzero().flatten()
        spans.append((int(where[0]), int(where.numel())))
    return spans


def _hidden(args, kwargs):
    return kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def _with_hidden(args, kwargs, value):
    if "hidden_states" in kwargs:
        return args, {**kwargs, "hidden_states": value}
    return (value, *args[1:]), kwargs


def _capture(layers, inputs: list, outputs: list) -> list:
    """Hooks that keep each layer's input and output."""

    def pre(i):
        def hook(module, args, kwargs):
            inputs[i] = _hidden(args, kwargs).detach()

        return hook

    return _hooks(layers, pre, outputs)


def _feed(layers, inputs: list, start: int, length: int, outputs: list) -> list:
    """Hooks that give each layer the packed run's input for this sequence, and keep its output."""

    def pre(i):
        def hook(module, args, kwargs):
            return _with_hidden(args, kwargs, inputs[i][:1, start : start + length])

        return hook

    return _hooks(layers, pre, outputs)


def _hooks(layers, pre, outputs: list) -> list:
    """`pre(i)` before layer i, and a hook keeping layer i's output in outputs[i]."""

    def post(i):
        def hook(module, args, kwargs, output):
            outputs[i] = (output[0] if isinstance(output, tuple) else output).detach()

        return hook

    return [
        h
        for i, layer in enumerate(layers)
        for h in (
            layer.register_forward_pre_hook(pre(i), with_kwargs=True),
            layer.register_forward_hook(post(i), with_kwargs=True),
        )
    ]


def layer_leaks(text_config, batch: Batch, *, attn_implementation: str, use_cache: bool) -> list[float]:
    """Per layer: the largest difference between a sequence in the packed row and alone, relative to
    the largest value alone (max over the row's sequences)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    tiny = tiny_config(text_config)
    model = AutoModelForCausalLM.from_config(tiny, attn_implementation=attn_implementation, dtype=torch.float32)
    model.train()  # as in training; dropout is 0 in these configs
    layers = _decoder_layers(model)
    packed_in, packed_out = [None] * len(layers), [None] * len(layers)
    # the first row; other keywords (a varlen kernel's cu_seq_lens) pass as they are
    row = {k: v[:1] if isinstance(v, torch.Tensor) and v.dim() == 2 else v for k, v in batch.kwargs.items()}
    hooks = _capture(layers, packed_in, packed_out)
    with torch.no_grad():
        model.get_decoder()(**row, use_cache=use_cache)
    for h in hooks:
        h.remove()
    worst = [0.0] * len(layers)
    for start, length in _spans(batch):
        alone_out = [None] * len(layers)
        hooks = _feed(layers, packed_in, start, length, alone_out)
        with torch.no_grad():
            model.get_decoder()(input_ids=row["input_ids"][:, start : start + length], use_cache=False)
        for h in hooks:
            h.remove()
        for i in range(len(layers)):
            ref = alone_out[i]
            diff = (packed_out[i][:1, start : start + length] - ref).abs().max()
            worst[i] = max(worst[i], float(diff / ref.abs().max().clamp(min=1e-30)))
    return worst
