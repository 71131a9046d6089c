"""Variants: named, documented changes to the harness's step, each measured in its own process.

`baseline` is the harness as it is (probes.step.train.contract). Every other variant changes one piece:

- `bf16-autocast`: adapter weights fp32, the forward and loss under bf16 autocast. Caveat: the LoRA
  matmuls run in bf16 (fp32 master weights and optimizer state kept).
- `bf16-adapters`: adapter weights (and so their AdamW state) stored in bf16. Caveat: optimizer
  precision, updates below a weight's bf16 resolution are lost.
- `fused-adamw`: the harness's AdamW with `fused=True`, each parameter group's lr, betas, eps, weight decay
  and amsgrad kept. Caveat: none expected (the same AdamW update); with an optimizer that is not AdamW (or
  Adam without weight decay) the row is `not applicable`.
- `grad-ckpt`: gradient checkpointing of the decoder layers (non-reentrant). Caveat: memory for time,
  every layer's forward runs twice.
- `compile`: `torch.compile` of each decoder layer (regional compilation). Caveat: compile time before
  the first step (`compile_s`), and about as long again for each further graph dynamo compiles: a padded or
  unpadded batch, one row, the first other width, the first other row count (then those dimensions are
  dynamic and every later shape reuses its graph; `replay` pays these in its warm-up).
- `ce-chunk=N`: the cross-entropy chunk, N tokens (0: full logits). Caveat: memory for time; the same loss.
- `liger`: Liger Kernel's Triton RoPE, SwiGLU and RMSNorm (probes.step.variants.libvariants; needs liger-kernel
  and a CUDA device, else the row is `not applicable: ...`).
- `float8`: torchao's float8 matmuls for the frozen base projections under the adapters
  (probes.step.variants.libvariants; needs torchao and a card of compute capability 8.9 or more: H100/H200,
  GB10). Caveat: the base projections' forward and input-gradient GEMMs in e4m3/e5m2 with dynamic per-tensor
  scales; pays only compiled.
- `float8-frozen`: labprobe's own float8 for the frozen base projections (probes.step.variants.fp8): each weight
  quantized once with row-wise scales, no weight-gradient GEMM (the weight is frozen); needs a card of compute
  capability 8.9 or more on CUDA (a CPU runs torch's own `_scaled_mm`). Caveat: the base projections' forward
  and input-gradient GEMMs in e4m3; eager it is slower than bf16, and compiled it is refused on CUDA (its compiled
  backward lost the input gradient on an H100).
- `cuda-graphs`: each decoder layer compiled with `mode="reduce-overhead"` (CUDA graphs); needs CUDA. Caveat:
  a graph and its memory pool per shape; pays only where the step is launch-bound (`--search` tries it only
  where the current stack's GPU idles).
- `micro-batch=N`: the step's rows in micro-batches of N rows, gradients accumulated before the one optimizer
  step: the same tokens per optimizer step, so the numerics compare. Caveat: memory for time.
- `PKG.MODULE:NAME`: a lab's own Variant object, imported (its `prepare(model)` runs after LoRA).

A stack `a+b+c` is every change of its members at once (probes.step.variants.stacks, whose `parse` a probe's
Config calls once to resolve its `--variant` values), named canonically (members sorted); members that set
one piece two ways are refused, naming the conflict. An unknown name is a FieldError naming the known ones
(one line, exit 2).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from probes.result import FieldError, shown
from probes.step.variants.names import BASELINE, CE_CHUNK, MICRO_BATCH

if TYPE_CHECKING:
    import torch

    from probes.step.train.contract import Contract

KEEP = "keep"
DTYPES = ("bfloat16", "float16", "float32")
"""The dtypes a Variant may name (torch's names): what autocast and adapters are run in."""


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    caveat: str
    autocast_dtype: str | None = KEEP
    """A dtype's name ("bfloat16"), None (no autocast), or KEEP (the harness's). Names, not torch dtypes: a
    sweep's driver checks a plan's variants without importing torch (a lab variant's torch.dtype is named here)."""
    adapter_dtype: str | None = None
    """Cast the trainable (adapter) parameters to this dtype (its name) after LoRA is applied."""
    fused_adamw: bool = False
    gradient_checkpointing: bool | None = None
    compile: bool = False
    ce_chunk: int | None = None
    liger: bool = False
    float8: bool = False
    """torchao float8 matmuls for the frozen base projections (probes.step.variants.libvariants)."""
    float8_frozen: bool = False
    """labprobe's static float8 for the frozen base projections (probes.step.variants.fp8)."""
    compile_mode: str | None = None
    """torch.compile's mode for the compiled layers (None: its default; "reduce-overhead": CUDA graphs)."""
    micro_batch: int | None = None
    """Rows per micro-batch: the step's rows run in micro-batches of this many, accumulated (None: one batch)."""
    prepare: object = None
    """A lab variant's own change: called with the model after LoRA (and the dtype casts), before compiling."""

    def __post_init__(self) -> None:
        for field in ("autocast_dtype", "adapter_dtype"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):  # a torch.dtype: "torch.bfloat16" -> "bfloat16"
                value = str(value).removeprefix("torch.")
            allowed = (*DTYPES, KEEP) if field == "autocast_dtype" else DTYPES  # KEEP: the harness's autocast only
            if value is not None and value not in allowed:  # at plan time, not as an AttributeError in the worker
                raise FieldError("variant", f"{shown(self.name)}: {field} {value!r} is not one of {', '.join(allowed)}")
            object.__setattr__(self, field, value)

    def contract(self, base: Contract) -> Contract:
        """The harness's contract with this variant's pieces swapped in."""
        changes: dict = {}
        if self.autocast_dtype != KEEP:  # by value: a Variant unpickled elsewhere holds an equal string, not KEEP
            changes["autocast_dtype"] = torch_dtype(self.autocast_dtype)
        if self.fused_adamw:
            changes["make_optimizer"] = _fused_adamw(base.make_optimizer)
        if self.gradient_checkpointing is not None:
            changes["gradient_checkpointing"] = self.gradient_checkpointing
        return dataclasses.replace(base, **changes)


def torch_dtype(name: str | None) -> torch.dtype | None:
    """The torch dtype a Variant's dtype field names (None stays None); torch is imported here, where a step runs."""
    import torch

    return None if name is None else getattr(torch, name)


class NotApplicable(Exception):
    """A variant that cannot apply to this harness (its row says `not applicable: ...`, never a failure)."""


def _fused_adamw(make_optimizer):
    """The harness's own AdamW with fused=True: each parameter group as it was (lr, betas, eps, weight decay,
    amsgrad), so only the implementation changes. An Adam without weight decay is the same update; any
    other optimizer is not applicable (replacing it would change the training, not its speed)."""

    def make(params) -> torch.optim.Optimizer:
        import torch

        base = make_optimizer(list(params))
        decays = {group.get("weight_decay", 0.0) for group in base.param_groups}
        if not isinstance(base, torch.optim.AdamW) and not (type(base) is torch.optim.Adam and decays == {0.0}):
            raise NotApplicable(f"fused-adamw replaces AdamW; the harness's optimizer is {type(base).__name__}")
        unset = ("params", "fused", "foreach", "capturable", "differentiable")
        groups = [{"params": g["params"], **{k: v for k, v in g.items() if k not in unset}} for g in base.param_groups]
        return torch.optim.AdamW(groups, fused=True)

    return make


FIXED: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(BASELINE, "the harness as it is"),
        Variant(
            "bf16-autocast",
            "LoRA matmuls in bf16 under autocast; fp32 adapter weights and optimizer state kept",
            autocast_dtype="bfloat16",
            adapter_dtype="float32",
        ),
        Variant(
            "bf16-adapters",
            "optimizer precision: adapter weights and AdamW state in bf16, "
            "updates below a weight's bf16 resolution are lost",
            adapter_dtype="bfloat16",
        ),
        Variant(
            "fused-adamw",
            "none expected: the harness's AdamW update, each parameter group as it was, in one fused kernel "
            "per tensor group",
            fused_adamw=True,
        ),
        Variant(
            "grad-ckpt",
            "memory for time: every decoder layer's forward runs again in the backward",
            gradient_checkpointing=True,
        ),
        Variant(
            "compile",
            "compile time before the first step (compile_s), and about as long again for each further graph (a padded or unpadded batch, one row, the first other width or row count; then shapes are dynamic)",
            compile=True,
        ),
        Variant(
            "liger",
            "Liger Kernel's Triton RoPE, SwiGLU and RMSNorm (the harness keeps its own chunked CE, the role "
            "of Liger's fused linear CE); its kernels break compiled graphs",
            liger=True,
        ),
        Variant(
            "float8",
            "precision of the frozen base: its projections' forward and input-gradient GEMMs in float8 (e4m3, "
            "e5m2 gradients) with dynamic per-tensor scales (torchao Float8Linear); adapters, their matmuls and "
            "the optimizer as they were; torchao also runs each frozen weight's gradient GEMM and drops it; "
            "fast only compiled (the casts fuse)",
            float8=True,
        ),
        Variant(
            "float8-frozen",
            "precision of the frozen base: its projections' forward and input-gradient GEMMs in float8 (e4m3, "
            "row-wise scales; each weight quantized once, activations and gradients per call); no weight-gradient "
            "GEMM (the weight is frozen); adapters, their matmuls and the optimizer as they were; labprobe's own "
            "module (probes.step.variants.fp8), not a library's; slower than bf16 eager, and refused compiled on "
            "CUDA (its compiled backward lost the input gradient on an H100)",
            float8_frozen=True,
        ),
        Variant(
            "cuda-graphs",
            "each decoder layer compiled with mode=reduce-overhead: its launches replayed from CUDA graphs, a graph "
            "and its memory pool per shape (compile time as compile's); pays only where the step is launch-bound",
            compile=True,
            compile_mode="reduce-overhead",
        ),
    )
}
BASELINE_VARIANT = FIXED[BASELINE]
"""No change: the Variant a Spec measures unless told otherwise."""


def known() -> str:
    return ", ".join([*FIXED, "ce-chunk=N", "micro-batch=N"])


def get(name: str) -> Variant:
    """A single named variant (probes.step.variants.stacks's get also reads stacks and lab variants)."""
    if name in FIXED:
        return FIXED[name]
    match = CE_CHUNK.fullmatch(name)
    if match:
        chunk = int(match.group(1))
        return Variant(
            f"ce-chunk={chunk}",  # one name for one chunk: ce-chunk=0512 is stored as ce-chunk=512
            "memory for time: the same loss, a different peak of logits"
            + (" (0: full fp32 logits, HF's way)" if chunk == 0 else ""),
            ce_chunk=chunk,
        )
    match = MICRO_BATCH.fullmatch(name)
    if match:
        rows = int(match.group(1))
        if rows < 1:
            raise FieldError("variant", f"{shown(name)}: a micro-batch holds at least one row")
        return Variant(
            f"micro-batch={rows}",
            f"memory for time: the step's rows {rows} at a time, gradients accumulated over the micro-batches "
            "before one optimizer step (the same tokens and mean gradient per step, summed in another order)",
            micro_batch=rows,
        )
    raise FieldError("variant", f"{shown(name)}: unknown (known: {known()})")
