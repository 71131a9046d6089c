"""Checkpoint fingerprints: the same checkpoint on two hosts gets the same one, a different one does not.

The fingerprint hashes what defines a checkpoint and nothing about where it lies: config.json's
content (parsed and re-serialised with sorted keys, so whitespace and key order do not matter) and
the names (relative to the checkpoint directory) and byte sizes of its weight files. Sizes, not
content: hashing tens of GB of weights per job would cost minutes, and a retrained checkpoint at the
same path changes its config or sizes far more often than not (an honest limit, said here).

It must run on the host that runs the job (a pinned Ray task), since only that host sees its files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

from probes import read_config
from probes.result import InputError
from runner.hosts.nodes import node_host

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf", ".ckpt")


def fingerprint(path: str | Path) -> str:
    """16 hex digits over config.json content + weight-file names and sizes. `path`: a dir or config.json."""
    path = Path(path)
    config_file, config = read_config(path)
    root = config_file.parent
    weights = (
        sorted(
            (str(p.relative_to(root)), p.stat().st_size)
            for p in root.rglob("*")
            if p.is_file() and p.name.endswith(WEIGHT_SUFFIXES)
        )
        if path.is_dir()
        else []
    )
    blob = json.dumps({"config": config, "weights": weights}, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


@dataclasses.dataclass(frozen=True)
class Unreadable:
    """A checkpoint this host cannot fingerprint, and why (one line). A value, not an exception:
    one host's answer carries every checkpoint's, readable or not, back through one Ray task."""

    reason: str


def fingerprints(paths: dict[str, str]) -> dict[str, str | Unreadable]:
    """name -> fingerprint, or Unreadable for a checkpoint this host cannot read.

    One pinned task per host computes all of its checkpoints (a task per pair would cost a Ray
    round trip each for a few stat calls).
    """
    out: dict[str, str | Unreadable] = {}
    for name, path in paths.items():
        try:
            out[name] = fingerprint(path)
        except (InputError, OSError) as exc:
            out[name] = Unreadable(" ".join(str(exc).split()))
    return out


def host_fingerprints(by_host: dict[str, dict[str, str]]) -> dict[str, str | Unreadable]:
    """Run as a task pinned to a host: fingerprints of that host's checkpoints (it finds its own
    entry by the node's label, so one mapping serves every host's task)."""

    return fingerprints(by_host.get(node_host(), {}))
