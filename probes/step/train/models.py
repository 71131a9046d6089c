"""Models and training steps for the GPU probes, shared by `profile` and `carrier`.

A model loads from a local checkpoint directory (`from_pretrained`, local files only) or, with
weights "random", is built from the checkpoint's config.json with random weights: the same
architecture and the same speed, no weight files needed on the host. On the meta device nothing is
allocated: parameter counts only. LoRA and the loss come from the harness (`probes.step.harness`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
from pathlib import Path
from types import ModuleType

import torch
from torch import nn

from probes.result import InputError
from probes.step import harness as reference
from probes.step.choices import ROWS, Weights
from probes.step.train.checkpoint import load_text_config
from probes.step.train.contract import resolve


def pick_device(device: str) -> torch.device:
    """'auto': the GPU when there is one, else the CPU (tests, CI)."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"--device {device}: no CUDA device on this host")
    return torch.device(device)


def build_model(
    checkpoint: Path, *, weights: Weights, device: torch.device, dtype: torch.dtype = torch.bfloat16
) -> nn.Module:
    """The causal LM of a checkpoint, in `dtype`, SDPA attention, on `device` (meta: no memory)."""
    from transformers import AutoModelForCausalLM

    config = load_text_config(checkpoint)  # InputError for a missing or malformed config.json
    if weights == "random" or device.type == "meta":
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    else:
        try:
            model = AutoModelForCausalLM.from_pretrained(
                checkpoint, local_files_only=True, dtype=dtype, attn_implementation="sdpa"
            )
        except (OSError, ValueError) as exc:
            raise InputError(
                f"{checkpoint}: cannot load weights ({exc}); --weights random builds it from config.json"
            ) from None
        model = model.to(device)
    model.tie_weights()
    return model


def with_lora(model: nn.Module, harness: ModuleType, *, rank: int, alpha: float) -> nn.Module:
    """LoRA by the harness's apply_lora, or the reference's (probes.step.train.contract names the fallback)."""
    from probes.step.train import lora_targets

    apply = getattr(harness, "apply_lora", reference.apply_lora)
    return lora_targets.apply(harness, apply, reference.discover_target_parameters, model, rank=rank, alpha=alpha)


def count_params(model: nn.Module) -> tuple[int, int]:
    """(total, trainable); a tied weight counts once (parameters() de-duplicates)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params), sum(p.numel() for p in params if p.requires_grad)


def make_batch(
    *,
    vocab_size: int,
    batch_size: int,
    seq_len: int,
    device: torch.device,
    real_lengths: list[int] | None = None,
    seed: int = 0,
    packed: list | None = None,
) -> dict[str, torch.Tensor]:
    """Random token ids; with real_lengths, right padding (labels -100) and an explicit mask. With `packed`
    (each row's sequence lengths, probes.corpus.batching.packed_segments), rows of several sequences as a
    packing collator gives them: positions restart at each sequence and no attention mask, from which
    transformers builds the block-diagonal mask; a row's tail past its sequences is padding (labels -100)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(1, vocab_size, (batch_size, seq_len), generator=generator)
    batch = {"input_ids": input_ids, "labels": input_ids.clone()}
    if packed is not None:
        batch["position_ids"] = torch.stack([_restarting_positions(row, seq_len) for row in packed])
        real = torch.arange(seq_len)[None, :] < torch.tensor([int(sum(row)) for row in packed])[:, None]
        batch["labels"] = input_ids.masked_fill(~real, -100)
    elif real_lengths is not None:
        real = torch.arange(seq_len)[None, :] < torch.tensor(real_lengths)[:, None]
        batch["input_ids"] = input_ids.masked_fill(~real, 0)
        batch["labels"] = input_ids.masked_fill(~real, -100)
        batch["attention_mask"] = real.long()
    return {k: v.to(device) for k, v in batch.items()}


PACKED_PER_ROW = 4
"""Sequences in a `packed` row: enough that its block-diagonal mask is far from the causal one."""


def row_fill(rows: str, batch_size: int, seq_len: int) -> dict:
    """make_batch's keyword for `rows`: full (every row seq_len real tokens: no mask, SDPA's causal fast
    path) or packed (each row PACKED_PER_ROW sequences, positions restarting: the block-diagonal mask of a
    packing collator; every position a real token, so tokens a step stay batch_size x seq_len)."""
    if rows not in ROWS:
        raise ValueError(f"rows must be one of {', '.join(ROWS)}, got {rows!r}")
    if rows == "packed":  # at most one sequence a token: a row of 2 tokens packs two
        parts = min(PACKED_PER_ROW, seq_len)
        part = seq_len // parts
        return {"packed": [[part] * (parts - 1) + [seq_len - part * (parts - 1)]] * batch_size}
    return {}


def _restarting_positions(lengths, width: int) -> torch.Tensor:
    """0..n-1 for each sequence of the row, then for the padding after them (its own span)."""
    spans = [int(n) for n in lengths] + ([width - int(sum(lengths))] if sum(lengths) < width else [])
    return torch.cat([torch.arange(n) for n in spans])


@dataclasses.dataclass
class TrainStep:
    """One optimiser step of LoRA training through the harness's pieces (probes.step.train.contract). A list
    of batches is gradient accumulation inside the step: each micro-batch's loss, weighted by its share
    of the labelled tokens (so the gradient is the mean over all of them, as one batch gives), is
    backpropagated in turn, then one optimiser step. The loss's forward runs under autocast when
    `autocast_dtype` is set, the backward outside it (as Trainer does). A harness `train_step` is
    called as is instead, with every micro-batch and the optimizer. `scope` (probes.step.measure.attribution)
    names the loss and the optimizer in a profile; a no-op outside one."""

    model: nn.Module
    loss_fn: object
    batch: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]]
    optimizer: torch.optim.Optimizer
    autocast_dtype: torch.dtype | None = None
    harness_step: object = None

    def __post_init__(self) -> None:
        # The weights never change between steps: count labelled tokens once, not inside every
        # timed step (three small kernels each, on a path that is often launch-bound).
        self.micro_batches = self.batch if isinstance(self.batch, list) else [self.batch]
        self.scales: list[torch.Tensor | None] = [None]
        if len(self.micro_batches) > 1:
            labelled = [(b["labels"][:, 1:] != -100).sum() for b in self.micro_batches]
            total = sum(labelled)
            self.scales = [n / total for n in labelled]

    def precision(self):
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        device = next(self.model.parameters()).device
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)

    def __call__(self) -> torch.Tensor:
        if self.harness_step is not None:
            return self.harness_step(self.model, self.micro_batches, self.optimizer)
        loss_sum = 0.0
        for b, scale in zip(self.micro_batches, self.scales):
            with self.precision(), scope("loss"):
                loss = self.loss_fn(self.model, b)
                if scale is not None:
                    loss = loss * scale
            loss.backward()
            loss_sum = loss_sum + loss.detach()
        with scope("optimizer"):
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        return loss_sum


def scope(name: str):
    """A profiler range named `labprobe::NAME` (probes.step.measure.attribution reads them back)."""
    return torch.autograd.profiler.record_function(f"labprobe::{name}")


def train_step(
    model: nn.Module,
    harness: ModuleType,
    batch: dict[str, torch.Tensor] | list[dict[str, torch.Tensor]],
    *,
    chunk_tokens: int,
    contract=None,
) -> TrainStep:
    """A step through the harness's contract (resolved here unless given, e.g. by a variant)."""
    contract = contract or resolve(harness)
    trainable = [p for p in model.parameters() if p.requires_grad]
    return TrainStep(
        model,
        contract.loss_fn(chunk_tokens),
        batch,
        contract.make_optimizer(trainable),
        autocast_dtype=contract.autocast_dtype,
        harness_step=contract.train_step,
    )


def is_oom(exc: BaseException) -> bool:
    """A CUDA out-of-memory, or the CPU allocator's refusal (a RuntimeError "can't allocate memory")."""
    text = str(exc).lower()
    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in text or "can't allocate memory" in text


def release(device: torch.device) -> None:
    """Give memory back between measurements (after an OOM, before the next model)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def peak_mem_bytes(device: torch.device) -> int | None:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
