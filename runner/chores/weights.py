"""Does a final adapter hold its weights? The header check `labprobe purge` makes before it deletes
a run's checkpoints/ (once they are gone, the adapter's weights are the run's only weights).

An adapter's weights are PEFT's `adapter_model.safetensors` or `adapter_model.bin`, at any depth
(PEFT saves a named adapter in a subfolder). Each must be a non-empty regular file whose header
parses: safetensors is an 8-byte little-endian header length, that many bytes of JSON naming at
least one tensor, and the tensors' byte ranges inside the file; a `.bin` is torch.save's zip
(holding `data.pkl`) or its legacy pickle (starting with torch's magic number). Only headers are
read, never tensors, and nothing here imports torch.
"""

from __future__ import annotations

import json
import os
import stat
import struct
import zipfile

from runner.chores.fstree import READ_FLAGS, file_kind

WEIGHTS_NAMES = ("adapter_model.safetensors", "adapter_model.bin")
_MAX_HEADER_BYTES = 100 * 1024 * 1024  # safetensors' own limit on the JSON header
_TORCH_LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19."  # pickle.dumps(torch's MAGIC_NUMBER, 2)


class NotWeights(ValueError):
    """A weights file that does not parse, with why."""


def weights_reasons(adapter: str) -> list[str]:
    """Why the adapter directory does not hold its weights (empty when it does)."""
    found = []
    for parent, dirs, files in os.walk(adapter, followlinks=False):
        dirs.sort()
        found += [os.path.join(parent, name) for name in sorted(files) if name in WEIGHTS_NAMES]
    if not found:
        return [f"final adapter holds no weights ({' or '.join(WEIGHTS_NAMES)})"]
    reasons = []
    for path in found:
        try:
            check_weights(path)
        except NotWeights as exc:
            reasons.append(
                f"final adapter's weights {os.path.relpath(path, os.path.dirname(adapter))} do not parse: {exc}"
            )
    return reasons


def check_weights(path: str) -> None:
    """Raise NotWeights unless `path` is a non-empty regular file whose header parses."""
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
                _check_torch_bin(handle)
        except OSError as exc:
            raise NotWeights(f"cannot read it ({exc.strerror or exc})") from exc


def _check_safetensors(handle, size: int) -> None:
    if size < 8:
        raise NotWeights(f"{size} bytes, shorter than the 8-byte header length")
    (length,) = struct.unpack("<Q", handle.read(8))
    if not 2 <= length <= min(_MAX_HEADER_BYTES, size - 8):
        raise NotWeights(f"header length {length} does not fit a {size}-byte file")
    try:
        header = json.loads(handle.read(length).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise NotWeights(f"the header is not JSON ({exc})") from exc
    if not isinstance(header, dict):
        raise NotWeights("the header is not a JSON object")
    tensors = {k: v for k, v in header.items() if k != "__metadata__"}
    if not tensors:
        raise NotWeights("the header names no tensor")
    data_bytes = size - 8 - length
    for name, spec in tensors.items():
        offsets = spec.get("data_offsets") if isinstance(spec, dict) else None
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) for o in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_bytes
        ):
            raise NotWeights(f"tensor {name!r} lies outside the file ({offsets} of {data_bytes} data bytes)")


def _check_torch_bin(handle) -> None:
    if handle.read(len(_TORCH_LEGACY_MAGIC)) == _TORCH_LEGACY_MAGIC:
        return
    handle.seek(0)
    try:
        with zipfile.ZipFile(handle) as archive:
            names = archive.namelist()
    except (zipfile.BadZipFile, ValueError) as exc:
        raise NotWeights(f"neither torch.save's zip nor its legacy pickle ({exc})") from exc
    if not any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
        raise NotWeights("a zip without torch.save's data.pkl")
