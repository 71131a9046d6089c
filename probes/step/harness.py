"""The reference harness, and the harness contract the GPU probes measure through.

A harness is any importable module (named by an import path, e.g. `mytrainer.train`) providing:

- `discover_target_modules(model) -> list[str]`: the module-name suffixes LoRA adapts;
- `compute_loss(model, batch) -> loss tensor`: the training loss of one batch, a dict holding
  `input_ids` (b, s), `labels` (b, s; -100 ignored) and optionally `attention_mask`.

Optional pieces (`apply_lora`, `autocast_dtype`, `make_optimizer`, `gradient_checkpointing`,
`train_step`) are described in probes.step.train.contract: each is used as given, and a missing one is
taken from this module and named in the probes' summary (`harness_fallbacks`). A `chunk_tokens`
keyword on `compute_loss` receives the probes' `--ce-chunk`. The probes import these and never
re-implement them: a probe of a re-implementation measures the probe. `load_harness(path)` turns a
path that does not import or lacks a required function into InputError.

This module is the reference. It does what a Transformers `Trainer` LoRA run with `bf16=True` does
(transformers 5.x with accelerate and torch >= 2.8, read from their source):
- the base model in bf16, PEFT LoRA with PEFT's defaults: adapter weights kept in fp32
  (`get_peft_model(..., autocast_adapter_dtype=True)`), rank, alpha, targets = every linear
  projection inside the decoder layers (Qwen3/Llama/Gemma: q,k,v,o,gate,up,down), no dropout;
- the forward and the loss under `torch.autocast(dtype=torch.bfloat16)` (accelerate wraps the
  model's forward so when `mixed_precision="bf16"`), the backward outside it: the LoRA matmuls run
  in bf16 on bf16 copies of the fp32 adapter weights (PEFT still casts each adapter's input to fp32
  first, and autocast casts it back);
- `AdamW(fused=True)`, Trainer's default optimizer `adamw_torch_fused`, lr 5e-5, weight decay 0;
- no gradient checkpointing (Trainer's default).
One difference, on purpose: the loss is a chunked cross-entropy that never holds more than
`chunk_tokens` x vocab logits (gradients computed chunk by chunk in the forward, as Liger's fused
linear CE does); `--ce-chunk 0` gives the full fp32 logits Trainer's model loss builds.

Before this contract the probes' step had no autocast (fp32 LoRA matmuls) and a for-each AdamW at
lr 1e-4: figures measured so are of another baseline, and the harness's hash in each job's
environment says which.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
import warnings
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from probes.result import InputError

REFERENCE = "probes.step.harness"
REQUIRED = ("discover_target_modules", "compute_loss")
CHUNK_TOKENS = 1024
"""Default cross-entropy chunk: 1,024 tokens x 151,936 (Qwen3 vocab) x 4 B = 0.58 GiB fp32 logits."""
autocast_dtype: torch.dtype | None = torch.bfloat16
"""The forward and loss run under bf16 autocast, as Trainer(bf16=True) does."""
gradient_checkpointing = False
"""Trainer's default."""


def make_optimizer(params) -> torch.optim.Optimizer:
    """Trainer's default optimizer (`adamw_torch_fused`) with its default lr and weight decay."""
    return torch.optim.AdamW(params, lr=5e-5, weight_decay=0.0, fused=True)


def load_harness(path: str) -> ModuleType:
    """Import the harness module; InputError naming the path or the missing function."""
    if not path or not path.strip():
        raise InputError("--harness is empty: give an import path such as probes.step.harness")
    _cwd_on_path()
    try:
        module = importlib.import_module(path)
    except Exception as exc:  # a SyntaxError or any error at import is the harness's, not ours
        first = (str(exc).splitlines() or [""])[0]
        raise InputError(f"--harness {path!r} does not import: {type(exc).__name__}: {first}") from None
    missing = [name for name in REQUIRED if not callable(getattr(module, name, None))]
    if missing:
        raise InputError(f"--harness {path!r} lacks {', '.join(missing)} (a harness provides {' and '.join(REQUIRED)})")
    return module


def _cwd_on_path() -> None:
    """Resolve a harness from the current directory, as `python -m` would: the `labprobe` script puts
    its own folder first on sys.path, not the cwd, so a lab's `mytrainer.train` would not import. The
    worker processes get this sys.path (probes.step.variants.processes), so they resolve it the same way."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)
        importlib.invalidate_caches()


def loss_fn(harness: ModuleType, chunk_tokens: int):
    """`batch -> loss` through the harness, passing the CE chunk where it takes one."""
    compute = harness.compute_loss
    if "chunk_tokens" in inspect.signature(compute).parameters:
        return lambda model, batch: compute(model, batch, chunk_tokens=chunk_tokens)
    return compute


def discover_target_modules(model: nn.Module) -> list[str]:
    """Suffixes of every nn.Linear inside the decoder's layers (not lm_head, not a vision tower), routers
    excluded (probes.step.train.lora_targets): a suffix that also names a router (Gemma-4's `router.proj`) is
    left out whole, since PEFT matches suffixes."""
    from probes.step.train import lora_targets

    layers = _decoder_layers(model)
    moe = lora_targets.num_experts(model)
    linears = [(name, m) for layer in layers for name, m in layer.named_modules() if isinstance(m, nn.Linear)]
    routers = {name.rsplit(".", 1)[-1] for name, m in linears if lora_targets.is_router(name, m, moe)}
    names = {name.rsplit(".", 1)[-1] for name, _ in linears} - routers
    order = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return sorted(names, key=lambda n: (order.index(n) if n in order else len(order), n))


def discover_target_parameters(model: nn.Module) -> list[str]:
    """The fused experts of an MoE decoder (3-D parameters of an `experts` module, e.g.
    `experts.gate_up_proj`), which PEFT adapts through `target_parameters`; [] for a dense model."""
    layers = _decoder_layers(model)
    return sorted(
        {
            ".".join(name.split(".")[-2:])
            for layer in layers
            for name, p in layer.named_parameters()
            if p.ndim == 3 and name.split(".")[-2] == "experts"
        }
    )


def _decoder_layers(model: nn.Module) -> nn.ModuleList:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    decoder = base.get_decoder() if hasattr(base, "get_decoder") else base.model
    layers = getattr(decoder, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise InputError(f"{type(base).__name__}: no decoder layers found to target")
    return layers


def apply_lora(
    model: nn.Module, *, rank: int, alpha: float, targets: list[str], target_parameters: list[str] | None = None
) -> nn.Module:
    """PEFT LoRA with its defaults (adapter weights kept in fp32 over a bf16 base); `target_parameters`:
    parameters that are no nn.Linear (fused experts), adapted through PEFT's ParamWrapper."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,
        target_modules=list(targets),
        target_parameters=list(target_parameters) if target_parameters else None,
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    with warnings.catch_warnings():
        # PEFT asks transformers 5.x a deprecated question on every call; it is PEFT's to fix.
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        return get_peft_model(model, config)


def compute_loss(model: nn.Module, batch: dict[str, torch.Tensor], *, chunk_tokens: int = CHUNK_TOKENS) -> torch.Tensor:
    """Mean next-token CE over labelled tokens; chunk_tokens 0 builds the full logits (HF's way)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    kwargs = {k: batch[k] for k in ("input_ids", "attention_mask", "position_ids") if k in batch}
    hidden = base.get_decoder()(**kwargs, use_cache=False).last_hidden_state
    labels = batch["labels"][:, 1:].reshape(-1)
    hidden = hidden[:, :-1].reshape(-1, hidden.shape[-1])
    return cross_entropy(hidden, base.get_output_embeddings().weight, labels, chunk_tokens)


def cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    """lm_head + mean CE over labels != -100; chunked when 0 < chunk_tokens < tokens."""
    if chunk_tokens <= 0 or chunk_tokens >= hidden.shape[0]:
        return F.cross_entropy(_upcast(F.linear(hidden, weight)), labels, ignore_index=-100)
    return _ChunkedLinearCE.apply(hidden, weight, labels, chunk_tokens)


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits go to fp32 for the loss, as HF does; fp32/fp64 stay as they are."""
    return x.float() if x.dtype in (torch.bfloat16, torch.float16) else x


class _ChunkedLinearCE(torch.autograd.Function):
    """Loss and its gradients chunk by chunk in the forward: peak logits = chunk x vocab."""

    @staticmethod
    def forward(ctx: Any, hidden, weight, labels, chunk_tokens: int):
        num_labelled = (labels != -100).sum().clamp(min=1)
        loss = torch.zeros((), device=hidden.device, dtype=_upcast(hidden[:0]).dtype)
        grad_hidden = torch.zeros_like(hidden) if hidden.requires_grad else None
        grad_weight = torch.zeros_like(_upcast(weight)) if weight.requires_grad else None
        for start in range(0, hidden.shape[0], chunk_tokens):
            h, y = hidden[start : start + chunk_tokens], labels[start : start + chunk_tokens]
            logits = _upcast(F.linear(h, weight))
            loss += F.cross_entropy(logits, y, ignore_index=-100, reduction="sum")
            # d(sum CE)/d logits = softmax - onehot, zero on ignored rows. Written without boolean indexing:
            # `grad[keep, y[keep]]` runs nonzero, which waits for the GPU in every chunk and leaves it idle
            # while the host launches what follows. The same values to the bit (x + -1 is x - 1; an ignored
            # row is filled with 0, NaN or not), on the cast chunk: half the bytes where hidden is bf16.
            grad = logits.softmax(-1)
            keep = (y != -100).unsqueeze(1)
            grad.scatter_add_(1, y.clamp(min=0).unsqueeze(1), -keep.to(grad.dtype))
            grad = (grad / num_labelled).to(hidden.dtype).masked_fill_(~keep, 0.0)
            if grad_hidden is not None:
                grad_hidden[start : start + chunk_tokens] = grad @ weight
            if grad_weight is not None:
                grad_weight += _upcast(grad.t() @ h)
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.weight_dtype = weight.dtype
        return loss / num_labelled

    @staticmethod
    def backward(ctx: Any, grad_loss):
        grad_hidden, grad_weight = ctx.saved_tensors
        gh = grad_hidden * grad_loss.to(grad_hidden.dtype) if grad_hidden is not None else None
        gw = (grad_weight * grad_loss).to(ctx.weight_dtype) if grad_weight is not None else None
        return gh, gw, None, None
