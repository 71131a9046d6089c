"""Which implementation the model's kernels took in the timed process: the fast one, or a reference fallback.

Hybrid models are fast only with their kernels installed: Qwen3.5's Gated DeltaNet layers call
`chunk_gated_delta_rule` from flash-linear-attention (`fla`, pure Python + Triton) and
`causal_conv1d_fn` from causal-conv1d (a CUDA extension compiled at install: the registry has no
wheel, so `pip install causal-conv1d` needs nvcc and the torch headers). Without them, or on a device
they do not run on (the CPU), transformers 5.x logs once per process

    `chunk_gated_delta_rule` is falling back to its reference PyTorch implementation because
    `flash-linear-attention` is either not installed or doesn't support the device of the inputs.

and runs a Python loop over 64-token chunks. The probes' step runs in a child process whose stderr
nobody reads, so `watch` catches those records (transformers' logger and Python warnings) inside the
worker, and `fallbacks` turns them into `(function, package)` pairs stored with the row
(`kernel_fallbacks`); the carrier check `fast_kernels` fails on any, saying what to install.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import re
import warnings

from probes.result import Check

_FALLBACK = re.compile(r"`(\w+)` is falling back to its reference PyTorch implementation because `([\w.-]+)`")
_OLD_FAST_PATH = re.compile(r"fast path is not available", re.IGNORECASE)
INSTALL = {
    "flash-linear-attention": "pip install flash-linear-attention (pure Python + Triton; needs a CUDA device)",
    "causal_conv1d": "pip install causal-conv1d (no wheel on the registry: compiles a CUDA extension, "
    "needs nvcc and the torch headers)",
}
PACKAGES = ("flash-linear-attention", "fla-core", "causal-conv1d")


class _Catch(logging.Handler):
    def __init__(self, out: list[str]):
        super().__init__(logging.WARNING)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        self.out.append(record.getMessage())


@contextlib.contextmanager
def watch(out: list[str]):
    """Append to `out` every warning transformers logs (and Python warns) inside the block."""
    logger = logging.getLogger("transformers")
    # transformers logs each fallback once a process (warning_once): forget what it told an earlier block
    forget = getattr(getattr(logging.Logger, "warning_once", None), "cache_clear", None)
    if forget is not None:
        forget()
    handler = _Catch(out)
    level = logger.level
    logger.addHandler(handler)
    # TRANSFORMERS_VERBOSITY=error would silence the very warnings this is for
    logger.setLevel(min(level or logging.WARNING, logging.WARNING))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            logger.removeHandler(handler)
            logger.setLevel(level)
            out.extend(str(w.message) for w in caught)


def fallbacks(messages: list[str]) -> list[str]:
    """`function (package)` for each reference fallback named in the messages, once each, in order."""
    found: list[str] = []
    for message in messages:
        for func, package in _FALLBACK.findall(message):
            found.append(f"{func} ({package})")
        if _OLD_FAST_PATH.search(message):
            found.append(" ".join(message.split())[:160])
    return list(dict.fromkeys(found))


def installed() -> dict[str, str | None]:
    """Versions of the kernel packages in this process's environment (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def advice(fallback: list[str]) -> str:
    """What to install for the fallbacks seen (the package named in each)."""
    packages = []
    for entry in fallback:
        named = re.search(r"\(([\w.-]+)\)$", entry)
        packages.append(named.group(1) if named else entry)
    return "; ".join(INSTALL.get(p, f"install the fast kernel for: {p}") for p in dict.fromkeys(packages))


def fast_kernels_check(slow: dict[str, list[str]], *, measured: bool) -> Check:
    """The `fast_kernels` check of carrier and profile: fails when a timed process ran a reference fallback
    (`slow`: what ran it, e.g. `model/variant` -> its fallbacks), naming what to install; and when nothing
    measured a step (`measured` false: the kernels that ran are unknown)."""
    slow = {name: found for name, found in slow.items() if found}
    if not slow and not measured:
        return Check(name="fast_kernels", ok=False, detail="no row measured a step: the kernels that ran are unknown")
    if not slow:
        return Check(name="fast_kernels", ok=True, detail="no kernel fell back to a reference implementation")
    seen = sorted({f.strip() for found in slow.values() for f in found})
    return Check(
        name="fast_kernels",
        ok=False,
        detail=f"{', '.join(slow)} ran reference fallbacks ({', '.join(seen)}): "
        f"these rows time the slow path. Install: {advice(seen)}",
    )
