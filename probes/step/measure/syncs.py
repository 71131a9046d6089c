"""Where a training step waits for the device, named by the line that made it wait.

A step that reads a result back (`.item()` to log the loss, `if mask.any():`, indexing by a boolean mask,
which runs nonzero) stops the host until the GPU has finished everything queued before it. The GPU's
queue then runs dry and it idles while the host launches what follows, so a hiccup of the host at that
moment lands whole in the step's time. One step under a census counts each wait by the innermost line
outside torch:
- on CUDA through `torch.cuda.set_sync_debug_mode("warn")`. It sees the waits of ops called from Python;
  an op a compiled or FX graph calls directly (`torch.ops.aten...`) waits unseen, so for a compiled step
  count the runtime's synchronising calls in a profile instead (benchmarks/timeline.py does);
- on the CPU, which never waits, through a dispatch mode that flags the ops that would. A copy to the host
  (`.cpu()`, `.tolist()`) is no copy there and goes unseen, and compiled code runs eagerly under the mode.
A backward's waits surface when it returns, at the line that called backward. The census must follow a warm
step: a first call of a compiled function under the CPU's dispatch mode would leave it uncompiled for good.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import threading
import traceback
import warnings
from collections.abc import Callable
from numbers import Number
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READS_BACK = (
    "nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "equal", "allclose", "_unique2",
    "unique_consecutive", "unique_dim", "unique_dim_consecutive", "bincount",
)  # fmt: skip
"""aten ops whose output size or value the host reads back: on CUDA each waits for the GPU. `.item()`,
`bool(t)` and `int(t.max())` arrive as _local_scalar_dense; `torch.where(c)` and argwhere as nonzero."""
INDEXING = ("index", "index_put", "index_put_", "_index_put_impl_")
"""Indexing ops: with a boolean mask among the indices, CUDA runs nonzero inside them (the CPU's kernel does
it below the dispatcher, so the census looks at the indices)."""
_HERE = os.path.abspath(__file__)
_OPTIM = f"{os.sep}torch{os.sep}optim{os.sep}"


@dataclasses.dataclass(frozen=True)
class SyncRow:
    what: str
    """The op (CPU census) or the warning's text without its build path (CUDA)."""
    where: str
    """`folder/file:line` of the innermost frame outside torch."""
    count_per_step: int


def census(step: Callable[[], object], device: torch.device) -> list[SyncRow]:
    """One call of `step` under the census; its waits, most frequent first. Call it after a warm step (a
    first step's autotuning and compiling wait too) and outside any timing: the census slows its step."""
    seen: collections.Counter = collections.Counter()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.get_sync_debug_mode()
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # every wait, not the first of each line
            warnings.showwarning = lambda message, *rest, **kw: _seen(seen, str(message))
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode(before)  # the lab's own setting ("error", say) back
        torch.cuda.synchronize(device)  # the step's end, after the census: the caller's wait, not the step's
    else:
        with _numbers_noted(), _ReadBacks(seen):
            step()
    return [SyncRow(what, where, n) for (what, where), n in seen.most_common()]


def reads_back(func, args, kwargs=None, value_is_number: bool = False) -> str | None:
    """What the op would read back from a CUDA device, None when nothing. `value_is_number`: the op assigns
    a Python number (`t[mask] = 0.0`), which PyTorch puts on the host whatever the tensor's device."""
    name = func.overloadpacket.__name__
    if name in READS_BACK:
        return None if name == "_local_scalar_dense" and _in_optimizer() else name
    if name == "repeat_interleave" and func._overloadname != "self_int" and (kwargs or {}).get("output_size") is None:
        return "repeat_interleave by a tensor of counts (its output size)"
    if name == "histc" and (args[2] if len(args) > 2 else 0) == (args[3] if len(args) > 3 else 0):
        return "histc over the data's own range (its min and max)"  # min == max (0, 0 by default)
    return _mask_index(name, args, value_is_number)


def _mask_index(name: str, args, value_is_number: bool) -> str | None:
    """Indexing by a boolean mask runs nonzero on CUDA, except where ATen's index_put_ fills by the mask
    instead (its canDispatchToMaskedFill: no size to learn): one mask the only index tensor (`None`s for
    whole dimensions beside it allowed), one value of one element that is on the host, no accumulate.
    `t[mask] = 0.0` is such; `t[mask] = t.mean()` and `t[mask] = torch.tensor(0.0, device=t.device)` are
    not (their value is on the GPU). On the CPU every tensor is on the host: the census takes a number
    assigned from Python for the host value (a CPU tensor a lab assigns on purpose is counted, wrongly)."""
    indices = [t for t in (args[1] if name in INDEXING and len(args) > 1 else ()) or () if t is not None]
    masks = [t for t in indices if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)]
    if not masks:
        return None
    accumulate = len(args) > 3 and bool(args[3])
    if name != "index" and value_is_number and len(indices) == 1 and not accumulate:
        return None
    return f"{name} by a boolean mask (nonzero)"


def _in_optimizer() -> bool:
    """A `.item()` inside torch.optim: the step counter of a non-fused AdamW, which lives on the CPU even
    when the parameters are on a GPU (no wait there)."""
    return any(_OPTIM in f.filename for f in traceback.extract_stack())


class _ReadBacks(TorchDispatchMode):
    def __init__(self, seen: collections.Counter):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        what = reads_back(func, args, kwargs, _value_is_number())
        if what:
            self.seen[(what, _caller())] += 1
        return func(*args, **(kwargs or {}))


_ASSIGNING = threading.local()
"""This thread's assignments in progress (`numbers`): whether each one's value is a Python number."""
_PATCH_LOCK = threading.Lock()
_PATCH: dict = {"depth": 0, "own": False, "original": None}


def _setitem(tensor, key, value):
    numbers = _ASSIGNING.__dict__.setdefault("numbers", [])
    numbers.append(isinstance(value, Number))
    try:
        return _PATCH["original"](tensor, key, value)
    finally:
        numbers.pop()


def _value_is_number() -> bool:
    numbers = getattr(_ASSIGNING, "numbers", None)
    return bool(numbers) and numbers[-1]


@contextlib.contextmanager
def _numbers_noted():
    """`Tensor.__setitem__` noting, per thread, whether the value it assigns is a Python number (the
    dispatcher sees the number as a tensor like any other). Installed once however many censuses overlap, in
    whatever order they end, and put back as it was when the last one ends."""
    with _PATCH_LOCK:
        if _PATCH["depth"] == 0:
            _PATCH["own"], _PATCH["original"] = "__setitem__" in vars(torch.Tensor), torch.Tensor.__setitem__
            torch.Tensor.__setitem__ = _setitem
        _PATCH["depth"] += 1
    try:
        yield
    finally:
        with _PATCH_LOCK:
            _PATCH["depth"] -= 1
            if _PATCH["depth"] == 0:
                if _PATCH["own"]:
                    torch.Tensor.__setitem__ = _PATCH["original"]
                else:
                    del torch.Tensor.__setitem__


def _seen(seen: collections.Counter, message: str) -> None:
    if "synchroniz" in message:
        seen[(message.split(" (Triggered")[0][:100], _caller())] += 1  # no build path: hosts compare


def _caller() -> str:
    """`folder/file:line` of the innermost frame outside torch, the warnings module and this module."""
    stack = traceback.extract_stack()
    outside = [
        f for f in stack
        if f"{os.sep}torch{os.sep}" not in f.filename and Path(f.filename).name != "warnings.py"
        and os.path.abspath(f.filename) != _HERE
    ]  # fmt: skip
    frame = outside[-1] if outside else stack[0]
    path = Path(frame.filename)
    where = f"{path.parent.name}/{path.name}:{frame.lineno}"  # its folder too: a lab's harness.py is not ours
    # a name in bytes that are not UTF-8 (kept as surrogates) would stop the store and the JSON printer
    return where.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
