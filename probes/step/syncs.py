"""Where a training step waits for the device, named by the line that made it wait.

A step that reads a result back (`.item()` to log the loss, `if mask.any():`, indexing by a boolean mask,
which runs nonzero) stops the host until the GPU has finished everything queued before it. The GPU's
queue then runs dry and it idles while the host launches what follows, so a hiccup of the host at that
moment lands whole in the step's time. One step under a census counts each wait by the innermost line
outside torch: on CUDA through `torch.cuda.set_sync_debug_mode("warn")` (every synchronising call, compiled
code's too); on the CPU, which never waits, through a dispatch mode that flags the ops that would.
A backward's waits surface when it returns, at the line that called backward. On the CPU a copy to the host
(`.cpu()`, `.tolist()`) is no copy and goes unseen: the GPU's census sees it.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

READS_BACK = (
    "nonzero", "_local_scalar_dense", "is_nonzero", "masked_select", "equal", "_unique2", "unique_consecutive",
    "unique_dim", "bincount",
)  # fmt: skip
"""aten ops whose output size or value the host reads back: on CUDA each waits for the GPU. `.item()`,
`bool(t)` and `int(t.max())` arrive as _local_scalar_dense; `torch.where(c)` and argwhere as nonzero."""
INDEXING = ("index", "index_put", "index_put_", "_index_put_impl_")
"""Indexing ops: with a boolean mask among the indices, CUDA runs nonzero inside them (the CPU's kernel does
it below the dispatcher, so the census looks at the indices)."""
_OWN_FRAMES = ("_caller", "_seen", "<lambda>", "__torch_dispatch__", "_showwarnmsg")


@dataclasses.dataclass(frozen=True)
class SyncRow:
    what: str
    """The op (CPU census) or the warning's text (CUDA)."""
    where: str
    """`folder/file:line` of the innermost frame outside torch."""
    count_per_step: int


def census(step: Callable[[], object], device: torch.device) -> list[SyncRow]:
    """One call of `step` under the census; its waits, most frequent first. Run it after a warm step (a first
    step's autotuning and compiling wait too) and outside any timing: the census slows the step it watches."""
    seen: collections.Counter = collections.Counter()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with warnings.catch_warnings():
            warnings.simplefilter("always")  # every wait, not the first of each line
            warnings.showwarning = lambda message, *rest, **kw: _seen(seen, str(message))
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize(device)  # the step's end, after the census: the caller's wait, not the step's
    else:
        with _ReadBacks(seen):
            step()
    return [SyncRow(what, where, n) for (what, where), n in seen.most_common()]


def reads_back(func, args, kwargs=None) -> str | None:
    """What the op reads back from the device, None when nothing."""
    name = func.overloadpacket.__name__
    if name in READS_BACK:
        return name
    if name == "repeat_interleave" and func._overloadname != "self_int" and (kwargs or {}).get("output_size") is None:
        return "repeat_interleave by a tensor of counts (its output size)"
    indices = args[1] if name in INDEXING and len(args) > 1 else ()
    masks = [t for t in indices or () if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8)]
    return f"{name} by a boolean mask (nonzero)" if masks else None


class _ReadBacks(TorchDispatchMode):
    def __init__(self, seen: collections.Counter):
        super().__init__()
        self.seen = seen

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        what = reads_back(func, args, kwargs)
        if what:
            self.seen[(what, _caller())] += 1
        return func(*args, **(kwargs or {}))


def _seen(seen: collections.Counter, message: str) -> None:
    if "synchroniz" in message:
        seen[(message[:80], _caller())] += 1


def _caller() -> str:
    """`folder/file:line` of the innermost frame outside torch, the warnings module and the census's hooks."""
    stack = traceback.extract_stack()
    outside = [
        f for f in stack
        if f"{os.sep}torch{os.sep}" not in f.filename and Path(f.filename).name != "warnings.py"
        and f.name not in _OWN_FRAMES
    ]  # fmt: skip
    frame = outside[-1] if outside else stack[0]
    path = Path(frame.filename)
    return f"{path.parent.name}/{path.name}:{frame.lineno}"  # its folder too: a lab's harness.py is not ours
