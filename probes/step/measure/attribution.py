"""Which module launched each kernel of a profiled step, and which attention backend really ran.

Ranges named `labprobe::SCOPE` mark the step's parts in the profile: module hooks put `decoder`
around the decoder, `lora` around each PEFT LoRA layer and `base` around its frozen base layer
(so the adapter's own work, casts included, is `lora`); probes.step.train.models's TrainStep puts `loss`
around the loss (lm_head and cross-entropy: the part outside `decoder`) and `optimizer` around the
optimizer step. A forward kernel belongs to the innermost range around the op that launched it.
A backward kernel belongs to the range of the forward op that recorded its autograd node: the
profiler gives both the same `sequence_nr` (per forward thread). On CUDA a kernel names its
launching op (the op's `kernels`, matched by correlation id); on the CPU the rows are the ops themselves.
A kernel whose op has no range is `unattributed`; probes.step.variants.whatif predicts nothing from a profile
where that is more than 10% of the kernel time.

`scopes(model)` installs the hooks (a context manager); `attribute(profile)` sums device time per
(scope, phase, category) and step; `backends(profile)` reads the attention backends that ran.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import torch
from torch import nn
from torch.autograd import DeviceType

from probes.step.measure import kernels

PREFIX = "labprobe::"
_BACKWARD = "autograd::engine::evaluate_function"
# (backend, pattern over a kernel or op name), first match wins: cuDNN's SDPA kernels say "flash" too
_BACKENDS = (
    ("cudnn", r"cudnn.*(sdpa|fmha|attention|flash)|_scaled_dot_product_cudnn_attention"),
    ("flash", r"flash_(fwd|bwd)|pytorch_flash|_scaled_dot_product_flash_attention"),
    ("mem-efficient", r"fmha_cutlass|efficient_attention|mem_eff"),
    ("math", r"_scaled_dot_product_attention_math"),
)


def _lora_layers(model: nn.Module) -> Iterator[nn.Module]:
    return (m for m in model.modules() if hasattr(m, "lora_A") and hasattr(m, "base_layer"))


def _decoder(model: nn.Module) -> nn.Module | None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.get_decoder() if hasattr(base, "get_decoder") else None


@contextlib.contextmanager
def scopes(model: nn.Module):
    """Install the labprobe:: ranges as forward hooks for the duration (profiling only)."""
    marked = [(m, "lora") for m in _lora_layers(model)] + [(m.base_layer, "base") for m in _lora_layers(model)]
    decoder = _decoder(model)
    if decoder is not None:
        marked.append((decoder, "decoder"))
    handles = []
    for module, name in marked:
        stack: list = []

        def enter(_module, _args, name=name, stack=stack):
            stack.append(torch.autograd.profiler.record_function(PREFIX + name).__enter__())

        def leave(_module, _args, _out, stack=stack):
            stack.pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _ancestors(event) -> Iterator:
    while event is not None:
        yield event
        event = event.cpu_parent


def _forward_scope(event) -> str:
    for e in _ancestors(event):
        if e.name.startswith(PREFIX):
            return e.name[len(PREFIX) :]
    return "other"


def _forward_scopes(cpu_events: list) -> dict[tuple[int, int], str]:
    """(thread, sequence_nr) of each forward op -> its scope; the last op of a number records the node."""
    out: dict[tuple[int, int], str] = {}
    for e in sorted(cpu_events, key=lambda e: e.time_range.start):
        if e.sequence_nr >= 0 and not any(a.name.startswith(_BACKWARD) for a in _ancestors(e)):
            out[e.thread, e.sequence_nr] = _forward_scope(e)
    return out


def _scope_of(op, forward: dict[tuple[int, int], str]) -> tuple[str, str]:
    """(scope, phase) of the op that launched a kernel."""
    for e in _ancestors(op):
        if e.name.startswith(PREFIX + "optimizer"):
            return "optimizer", "optimizer"
        if e.name.startswith(_BACKWARD):
            return forward.get((e.fwd_thread, e.sequence_nr), "unattributed"), "backward"
    return _forward_scope(op), "forward"


def _launched(profile: kernels.Profile, cpu: list) -> Iterator[tuple[object, str, float]]:
    """(launching op, kernel name, microseconds) of every device row. On CUDA each op lists the
    kernels it launched (`FunctionEvent.kernels`, matched by correlation id when the profile is
    parsed); a GPU user annotation (a record_function span mirrored on the device) is no kernel."""
    if profile.device_type == DeviceType.CPU:
        for row in profile.rows:
            if not row.name.startswith(PREFIX):  # a range's own self time is bookkeeping, not work
                yield row, row.name, kernels.self_us(row)
        return
    annotations = {e.name for e in profile.events if e.device_type != DeviceType.CPU and kernels._is_annotation(e)}
    for op in cpu:
        for k in getattr(op, "kernels", ()):
            if k.name not in annotations and not k.name.startswith(PREFIX) and not _listed_above(op, k):
                yield op, k.name, float(k.duration)


def _listed_above(op, kernel) -> bool:
    """Whether an enclosing event lists the same kernel. CUPTI's own overhead events inside a launch
    ("Command Buffer Full" when the host runs far ahead of the GPU, "Activity Buffer Request") share
    the launch's correlation id, so torch gives them its kernel too: measured on a 1.7B step at 4 x
    4,096 tokens, 11% of the kernel time was listed twice. The launching op is the outermost lister."""
    return any(kernel in getattr(a, "kernels", ()) for a in _ancestors(op.cpu_parent))


def attribute(profile: kernels.Profile) -> dict[str, float]:
    """Seconds of device time per step by "scope/phase/category" (the kernel table's categories)."""
    cpu = [e for e in profile.events if e.device_type == DeviceType.CPU and not getattr(e, "is_async", False)]
    forward = _forward_scopes(cpu)
    out: dict[str, float] = {}
    for op, name, us in _launched(profile, cpu):
        scope, phase = _scope_of(op, forward)
        key = f"{scope}/{phase}/{kernels.categorize(name)}"
        out[key] = out.get(key, 0.0) + us / 1e6 / profile.num_steps
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def total(
    attributed: dict[str, float], scope: str | None = None, phase: str | None = None, category: str | None = None
) -> float:
    """Sum of attributed seconds matching the given parts (None: any)."""

    def keep(key: str) -> bool:
        s, p, c = key.split("/", 2)
        return (scope is None or s == scope) and (phase is None or p == phase) and (category is None or c == category)

    return sum(v for k, v in attributed.items() if keep(k))


def backends(profile: kernels.Profile) -> list[str]:
    """Attention backends that ran: from device kernel names on a GPU, from op names on the CPU."""
    names = (
        {e.name for e in profile.rows}
        if profile.device_type == DeviceType.CUDA
        else {e.name for e in profile.events if e.device_type == DeviceType.CPU}
    )
    found = []
    for backend, pattern in _BACKENDS:
        if any(re.search(pattern, n.lower()) for n in names):
            found.append(backend)
    if profile.device_type == DeviceType.CPU and "flash" in found:
        found[found.index("flash")] = "flash (cpu)"
    return found
