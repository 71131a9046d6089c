"""Config-only checkpoints for sweep tests whose jobs are about dispatch, not the model: the `mask` probe
runs on two small layers in well under a second where the demo's configs take seconds a job."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from sweep_util import tiny_qwen3

TINY = ("tiny-a", "tiny-b")


def add_tiny_checkpoints(cluster_yaml: Path, names: tuple[str, ...] = TINY) -> tuple[str, ...]:
    """Add `names` to the cluster file's checkpoints: config-only Qwen3s (tiny_qwen3; the n-th with n + 2
    layers, so no two share a fingerprint) beside it, by absolute path (every host of the test machine reads
    them there). Plan entries name them in `checkpoints` (an entry without one runs every checkpoint)."""
    folder = cluster_yaml.parent / "tiny-checkpoints"
    data = yaml.safe_load(cluster_yaml.read_text())
    for layers, name in enumerate(names, start=2):
        config = tiny_qwen3(folder / name)
        (folder / name / "config.json").write_text(json.dumps({**config, "num_hidden_layers": layers}))
        data["checkpoints"].append({"name": name, "path": str(folder / name)})
    cluster_yaml.write_text(yaml.safe_dump(data, sort_keys=False))
    return names
