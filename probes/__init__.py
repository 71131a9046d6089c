"""labprobe's instruments: a package per probe (`probes.<name>`: config, probe, answer) and two kits shared by
them (`probes.step`, `probes.corpus`). This module's registry and `probes.result` are the door: the runner
imports nothing else from probes.

Modules are imported on demand so that `labprobe probe padding` does not pay for torch; an
ImportError inside a probe module propagates as itself, never as "probe not found".
"""

from __future__ import annotations

import importlib
from types import ModuleType

from probes.result import Check, InputError, ProbeResult
from probes.step.checkpoint import read_config  # the runner fingerprints a checkpoint's config.json with it
from probes.step.names import canonical as variant_name  # compare matches --variant as the store keeps names

__all__ = [
    "ANSWERS",
    "GPU_PROBES",
    "REGISTRY",
    "Check",
    "InputError",
    "ProbeResult",
    "answer",
    "get",
    "read_config",
    "run",
    "variant_name",
]

# name -> (module, what it settles)
REGISTRY: dict[str, tuple[str, str]] = {
    "mask": (
        "probes.mask.probe",
        "per-layer attention masks: SDPA fast path, sliding band, packed leaks (config only)",
    ),
    "padding": ("probes.padding.probe", "length distribution, padding waste per batching strategy, CE chunk sizing"),
    "bucket": ("probes.bucket.probe", "length-bucketing gain over a bucket-size sweep, source diversity per batch"),
    "profile": ("probes.profile.probe", "step-time scaling fit, padding penalty, CE wall clock, kernel table (GPU)"),
    "carrier": ("probes.carrier.probe", "training throughput of a model family: params, s/step, tok/s, MFU (GPU)"),
    "goodput": (
        "probes.goodput.probe",
        "epoch time, real tokens/s and budget hours per batching strategy, from a profile fit",
    ),
    "replay": (
        "probes.replay.probe",
        "a corpus's real batch shapes run through the harness: measured vs predicted (GPU)",
    ),
}

# Probes that need a GPU to give real numbers; the runner places these on idle GPU hosts.
GPU_PROBES = frozenset({"profile", "carrier", "replay"})

ANSWERS = ("mask", "padding", "bucket", "carrier", "profile", "goodput", "replay")
"""The probes with an answer module (`probes.<name>.answer`), in the order answers are shown when no plan gives one."""


def get(name: str) -> ModuleType:
    if name not in REGISTRY:
        raise InputError(f"unknown probe {name!r} (known: {', '.join(REGISTRY)})")
    return importlib.import_module(REGISTRY[name][0])


def answer(name: str) -> ModuleType | None:
    """The probe's answer module (QUESTION, TABLES, EXACT, RATIO_OF, figures), or None if it has none."""
    return importlib.import_module(f"probes.{name}.answer") if name in REGISTRY else None


def run(name: str, **fields) -> ProbeResult:
    """Build the probe's Config from keyword fields and run it inline."""
    module = get(name)
    return module.run(module.Config(**fields))
