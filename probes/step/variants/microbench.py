"""The micro-benchmarks behind the what-if predictions, run in the baseline's process after its
profile: each times, in isolation and at the production shape, the part of the step a variant
changes, under the baseline's setting and the variant's. probes.step.variants.whatif scales the profile's
attributed kernel time of that part by the ratio (variant / baseline) of these times: kernel time on
a GPU, as the profile counts it; wall time on the CPU.

- `lora`: one real LoRA layer of each distinct (in, out) shape, forward and backward on the step's
  tokens, minus its frozen base layer alone: the adapter path (casts, A, B, scaling, add) per
  setting: the baseline's, fp32 adapters under bf16 autocast, bf16 adapters. Weighted by how many
  layers have each shape.
- `optimizer`: the harness's optimizer, fused AdamW, and the harness's optimizer over bf16
  parameters, one step each over tensors shaped as the trainable parameters.
- `ce`: the reference cross-entropy (probes.step.harness) forward and backward at the current chunk
  and at each chunk a `ce-chunk=N` variant asks for.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable

import torch
from torch.autograd import DeviceType

from probes.step import harness as reference
from probes.step.measure import kernels

REPEATS = 10


def _time(fn: Callable[[], object], device: torch.device, repeats: int = REPEATS) -> float:
    """Seconds a call: on CUDA the kernel time (torch.profiler's device rows, probes.step.measure.kernels),
    the same measure the profile's attributed time is, so their ratio applies to it. Wall time
    would not: in isolation these short kernels leave the GPU idle while the host launches them,
    where in the step the host runs ahead behind the base model's large GEMMs. On the CPU, the
    mean wall time. 3 warm-up calls first."""
    for _ in range(3):
        fn()
    if device.type == "cuda":
        from torch.profiler import ProfilerActivity, profile

        torch.cuda.synchronize(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                fn()
            torch.cuda.synchronize(device)
        rows = kernels.device_rows(prof.events(), DeviceType.CUDA)
        return sum(map(kernels.self_us, rows)) / 1e6 / repeats
    begin = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - begin) / repeats


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return (
        torch.autocast(device_type=device.type, dtype=dtype)
        if dtype
        else torch.autocast(device_type=device.type, enabled=False)
    )


def _fwd_bwd(module, x: torch.Tensor, device: torch.device, dtype: torch.dtype | None) -> Callable[[], None]:
    def run() -> None:
        with _autocast(device, dtype):
            y = module(x)
        y.float().sum().backward()
        x.grad = None
        for p in module.parameters():
            p.grad = None

    return run


def _lora_layers(model) -> dict[tuple[int, int], list]:
    shapes: dict[tuple[int, int], list] = {}
    for m in model.modules():
        if hasattr(m, "lora_A") and hasattr(m, "base_layer") and hasattr(m.base_layer, "in_features"):
            shapes.setdefault((m.base_layer.in_features, m.base_layer.out_features), []).append(m)
    return shapes


def lora(model, autocast_dtype: torch.dtype | None, tokens: int, device: torch.device) -> dict[str, float]:
    """Adapter-path seconds per step (forward + backward, all layers) under each setting."""
    settings = {
        "baseline": (None, autocast_dtype),
        "bf16-autocast": (torch.float32, torch.bfloat16),
        "bf16-adapters": (torch.bfloat16, autocast_dtype),
    }
    out = dict.fromkeys(settings, 0.0)
    for (fan_in, _), layers in _lora_layers(model).items():
        x = torch.randn(tokens, fan_in, device=device, dtype=torch.bfloat16, requires_grad=True)
        for name, (adapter_dtype, autocast) in settings.items():
            layer = copy.deepcopy(layers[0])
            if adapter_dtype is not None:
                for p in layer.parameters():
                    if p.requires_grad:
                        p.data = p.data.to(adapter_dtype)
            whole = _time(_fwd_bwd(layer, x, device, autocast), device)
            base = _time(_fwd_bwd(layer.base_layer, x, device, autocast), device)
            out[name] += len(layers) * max(0.0, whole - base)
            del layer
    return out


def optimizer(model, make_optimizer, device: torch.device) -> dict[str, float]:
    """One optimizer step's seconds: the harness's, fused AdamW, the harness's over bf16 tensors."""
    shapes = [p for p in model.parameters() if p.requires_grad]

    def step_s(dtype: torch.dtype | None, make) -> float:
        params = [torch.nn.Parameter(torch.randn_like(p, dtype=dtype or p.dtype)) for p in shapes]
        for p in params:
            p.grad = torch.randn_like(p)
        opt = make(params)
        return _time(opt.step, device)

    def fused(params) -> torch.optim.Optimizer:
        return torch.optim.AdamW(params, lr=5e-5, fused=True)

    return {
        "baseline": step_s(None, make_optimizer),
        "fused-adamw": step_s(None, fused),
        "bf16-adapters": step_s(torch.bfloat16, make_optimizer),
    }


def cross_entropy(model, tokens: int, device: torch.device, autocast_dtype, chunks: list[int]) -> dict[str, float]:
    """Seconds of the reference CE (forward + backward) per chunk size, keyed by str(chunk)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    weight = base.get_output_embeddings().weight
    generator = torch.Generator(device=device).manual_seed(0)
    hidden = torch.randn(
        tokens, weight.shape[1], device=device, dtype=weight.dtype, generator=generator, requires_grad=True
    )
    labels = torch.randint(0, weight.shape[0], (tokens,), device=device, generator=generator)
    out = {}
    for chunk in dict.fromkeys(chunks):

        def run(chunk=chunk) -> None:
            with _autocast(device, autocast_dtype):
                loss = reference.cross_entropy(hidden, weight, labels, chunk)
            loss.backward()
            hidden.grad = None

        out[str(chunk)] = _time(run, device, repeats=3)
    return out


def run(model, pieces, spec, device: torch.device, chunk: int) -> dict:
    tokens = spec.batch_size * spec.seq_len
    return {
        "lora": lora(model, pieces.autocast_dtype, tokens, device),
        "optimizer": optimizer(model, pieces.make_optimizer, device),
        "ce": cross_entropy(model, tokens, device, pieces.autocast_dtype, [chunk, *spec.ce_chunks]),
        "ce_chunk": chunk,
    }
