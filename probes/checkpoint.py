"""A checkpoint's config.json, read once the same way everywhere (probes and fingerprints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from probes.result import InputError


def read_config(checkpoint: str | Path) -> tuple[Path, dict[str, Any]]:
    """(config.json's path, its content) from a checkpoint directory or the config.json itself."""
    checkpoint = Path(checkpoint)
    path = checkpoint / "config.json" if checkpoint.is_dir() else checkpoint
    if not path.is_file():
        raise InputError(f"{checkpoint}: no config.json (checkpoint missing on this host?)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: malformed config: {exc}") from None
    if not isinstance(raw, dict):
        raise InputError(f"{path}: malformed config: not a JSON object")
    return path, raw
