"""Does a final adapter load? The check `labprobe purge` makes before it deletes a run's
checkpoints/ (once they are gone, the adapter's weights are the run's only weights).

An adapter's weights are PEFT's `adapter_model.safetensors` or `adapter_model.bin`, at any depth
(PEFT saves a named adapter in a subfolder), each with PEFT's `adapter_config.json` beside it (a
readable JSON object: without it PEFT cannot load the weights). Each weights file is parsed in
full, as a loader would: safetensors' 8-byte header length and JSON header, every tensor's dtype
known, its shape times its dtype's size equal to its byte range, the ranges inside the file and
not overlapping; a `.bin` through `torch.load(weights_only=True, map_location="cpu")`, which reads
every tensor's storage (a zip without its data, or a file cut short, raises). A tensor with no
element is refused too: a loader takes it, but it holds no trained weights.
"""

from __future__ import annotations

import math
import os
import stat
import struct

from probes.result import loads
from runner.chores.fstree import READ_FLAGS, file_kind, walk

WEIGHTS_NAMES = ("adapter_model.safetensors", "adapter_model.bin")
CONFIG_NAME = "adapter_config.json"
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit on the JSON header
DTYPE_BYTES = {
    **dict.fromkeys(("BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "F8_E8M0"), 1),
    **dict.fromkeys(("U16", "I16", "F16", "BF16"), 2),
    **dict.fromkeys(("U32", "I32", "F32"), 4),
    **dict.fromkeys(("U64", "I64", "F64", "C64"), 8),
}
"""safetensors' dtypes of whole bytes; any other name (a sub-byte format, a typo) is not loadable here."""


class NotWeights(ValueError):
    """A weights file that does not parse, with why."""


def weights_reasons(adapter: str) -> list[str]:
    """Why the adapter directory does not hold its weights (empty when it does)."""
    found = []
    for parent, dirs, files in walk(adapter):
        dirs.sort()
        found += [os.path.join(parent, name) for name in sorted(files) if name in WEIGHTS_NAMES]
    if not found:
        return [f"final adapter holds no weights ({' or '.join(WEIGHTS_NAMES)})"]
    reasons = []
    for path in found:
        shown = os.path.relpath(path, os.path.dirname(adapter))
        try:
            check_weights(path)
        except NotWeights as exc:
            reasons.append(f"final adapter's weights {shown} do not load: {exc}")
        try:
            check_config(os.path.join(os.path.dirname(path), CONFIG_NAME))
        except NotWeights as exc:
            reasons.append(f"final adapter's {os.path.join(os.path.dirname(shown), CONFIG_NAME)} {exc}")
    return reasons


def check_config(path: str) -> None:
    """Raise NotWeights unless `path` is a regular file holding a JSON object."""
    try:
        fd = os.open(path, READ_FLAGS)
    except FileNotFoundError:
        raise NotWeights("is missing (PEFT cannot load the weights without it)") from None
    except OSError as exc:
        raise NotWeights(f"cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotWeights(f"is a {file_kind(mode)}, not a file")
        try:
            config = loads(handle.read(_MAX_HEADER_BYTES).decode("utf-8"))
        except OSError as exc:
            raise NotWeights(f"cannot be read ({exc.strerror or exc})") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise NotWeights(f"is not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise NotWeights("is not a JSON object")


def check_weights(path: str) -> None:
    """Raise NotWeights unless `path` is a non-empty regular file that loads, every tensor non-empty."""
    try:
        fd = os.open(path, READ_FLAGS)
    except OSError as exc:
        raise NotWeights(f"cannot open it ({exc.strerror})") from exc
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotWeights(f"a {file_kind(st.st_mode)}, not a file")
        if st.st_size == 0:
            raise NotWeights("0 bytes")
        try:
            if path.endswith(".safetensors"):
                _check_safetensors(handle, st.st_size)
            else:
                _check_torch_bin(handle, st.st_size)
        except OSError as exc:
            raise NotWeights(f"cannot read it ({exc.strerror or exc})") from exc


def _check_safetensors(handle, size: int) -> None:
    if size < 8:
        raise NotWeights(f"{size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", handle.read(8))
    if not 2 <= length <= min(_MAX_HEADER_BYTES, size - 8):
        raise NotWeights(f"header length {length} does not fit a {size}-byte file")
    try:
        header = loads(handle.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotWeights(f"the header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise NotWeights("the header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        raise NotWeights("the header names no tensor")
    ranges = sorted(_tensor_range(name, spec, size - 8 - length) + (name,) for name, spec in tensors.items())
    for (_, end, first), (start, _, second) in zip(ranges, ranges[1:]):
        if start < end:
            raise NotWeights(f"tensors {first!r} and {second!r} overlap")


def _tensor_range(name: str, spec: object, data_bytes: int) -> tuple[int, int]:
    """The tensor's byte range, checked against its dtype, its shape and the file's data bytes."""
    if not isinstance(spec, dict):
        raise NotWeights(f"tensor {name!r} is not described by an object")
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in DTYPE_BYTES:
        raise NotWeights(f"tensor {name!r} has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise NotWeights(f"tensor {name!r} has no valid shape ({shape!r})")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_bytes
    ):
        raise NotWeights(f"tensor {name!r} lies outside the file ({offsets} of {data_bytes} data bytes)")
    num = math.prod(shape)
    if num == 0:
        raise NotWeights(f"tensor {name!r} is empty (shape {shape})")
    if num * DTYPE_BYTES[dtype] != offsets[1] - offsets[0]:
        raise NotWeights(
            f"tensor {name!r}: shape {shape} of {dtype} is {num * DTYPE_BYTES[dtype]} bytes, "
            f"its range holds {offsets[1] - offsets[0]}"
        )
    return offsets[0], offsets[1]


def _check_torch_bin(handle, size: int) -> None:
    """torch.load with weights_only (no code runs), which reads every tensor's storage."""
    import torch  # only for a legacy .bin: safetensors adapters never load torch here

    try:
        loaded = torch.load(handle, weights_only=True, map_location="cpu")
    except Exception as exc:  # every way a file fails to load: unpickling, a missing record, EOF
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0].split(". This is")[0]
        raise NotWeights(f"torch.load(weights_only=True) fails on its {size} bytes: {first[:200]}") from None
    tensors = {k: v for k, v in loaded.items() if isinstance(v, torch.Tensor)} if isinstance(loaded, dict) else {}
    if not tensors:
        raise NotWeights("it holds no tensor (a state dict of tensors is what PEFT saves)")
    empty = [k for k, v in tensors.items() if v.numel() == 0]
    if empty:
        raise NotWeights(f"tensor {empty[0]!r} is empty (shape {list(tensors[empty[0]].shape)})")
