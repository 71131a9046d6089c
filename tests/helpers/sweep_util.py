"""Helpers shared by the sweep tests: a cluster file over the test cluster's hosts, store snapshots."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "demo"
CHECKPOINTS = ("qwen3-0.6b-base", "gemma-3-4b")


def write_cluster(folder: Path, plans: dict, *, extra_hosts: list[dict] = ()) -> Path:
    """gx10 reads the demo checkpoints where they are; ana-ml2 reads a copy at another path (the same
    checkpoints, so the same fingerprints); extra hosts read the demo's."""
    copy = folder / "ana-ml2-models"
    if not copy.exists():
        for name in CHECKPOINTS:
            shutil.copytree(DEMO / "checkpoints" / name, copy / name)
    hosts = [
        {
            "name": "gx10",
            "address": "127.0.0.1",
            "checkpoints_root": str(DEMO / "checkpoints"),
            "corpora_root": str(DEMO),
        },
        {"name": "ana-ml2", "address": "127.0.0.1", "checkpoints_root": str(copy), "corpora_root": str(DEMO)},
    ]
    hosts += [
        {"address": "127.0.0.1", "checkpoints_root": str(DEMO / "checkpoints"), "corpora_root": str(DEMO), **h}
        for h in extra_hosts
    ]
    data = {
        "store": {"root": "store"},
        "hosts": hosts,
        "checkpoints": [{"name": n, "path": n} for n in CHECKPOINTS],
        "corpora": [{"name": "demo", "path": "corpus.jsonl"}],
        "plans": plans,
    }
    path = folder / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def snapshot(root: Path) -> dict[str, int]:
    """Every stored file (relative path) -> its mtime in ns: what "nothing lost or rewritten" compares.
    Left out: the sweep lock, and Delta's `_last_checkpoint`, a pointer to the newest log checkpoint
    that delta-rs rewrites by design (the commits and checkpoints it points to are never rewritten)."""
    return {
        str(p.relative_to(root)): p.stat().st_mtime_ns
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in (".sweep.lock", "_last_checkpoint")
    }


def assert_kept(before: dict[str, int], after: dict[str, int]) -> None:
    lost = sorted(set(before) - set(after))
    rewritten = sorted(k for k in before if k in after and after[k] != before[k])
    assert not lost and not rewritten, f"lost {lost[:3]}, rewritten {rewritten[:3]}"


def tiny_qwen3(folder: Path) -> dict:
    """A config-only Qwen3 of two small layers (random weights): the job is about the path, not the model."""
    config = json.loads((REPO / "demo" / "checkpoints" / "qwen3-0.6b-base" / "config.json").read_text())
    config.update(
        num_hidden_layers=2,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=32,
    )
    config.pop("layer_types", None)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return config
