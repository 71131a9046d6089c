"""A checkpoint's config.json, read once the same way everywhere (probes and fingerprints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from probes.result import InputError, read_json_file, shown


def model_name(checkpoint: str | Path) -> str:
    """The name a model's rows carry (carrier's `model`): its checkpoint folder's name, also when the
    checkpoint was given as its config.json. goodput and replay match a stack's rows to a model by it."""
    path = Path(checkpoint)
    return path.parent.name if path.name == "config.json" else path.name


def read_config(checkpoint: str | Path) -> tuple[Path, dict[str, Any]]:
    """(config.json's path, its content) from a checkpoint directory or the config.json itself."""
    checkpoint = Path(checkpoint)
    path = checkpoint / "config.json" if checkpoint.is_dir() else checkpoint
    if not path.is_file():
        raise InputError(f"{checkpoint}: no config.json (checkpoint missing on this host?)")
    raw = read_json_file(path, "config")  # an unreadable, empty or malformed file: one line naming it
    if not isinstance(raw, dict):
        raise InputError(f"{path}: malformed config: not a JSON object")
    return path, raw


def load_text_config(checkpoint: Path):
    """The decoder's config from a checkpoint dir or config.json; multimodal -> its text part."""
    from transformers import AutoConfig

    path, raw = read_config(checkpoint)
    nested = isinstance(raw.get("text_config"), dict)
    prefix = "text_config." if nested else ""
    # before transformers words some of these its own way (and lets others through)
    check_sizes(path, raw["text_config"] if nested else raw, prefix, complete=False)
    if "model_type" not in raw:
        raise InputError(f"{path}: field 'model_type' is missing")
    model_type = raw.pop("model_type")
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if model_type not in CONFIG_MAPPING:  # its error lists every known type: kilobytes, not a line
        raise InputError(f"{path}: field 'model_type' {model_type!r} is unknown to this transformers")
    try:
        config = AutoConfig.for_model(model_type, **raw)
    except Exception as exc:  # noqa: BLE001 - transformers validates fields (strict dataclasses) its own way
        detail = " ".join(str(exc).split())[:300]
        raise InputError(f"{path}: {type(exc).__name__}: {detail}") from None
    text = config.get_text_config()
    check_sizes(path, text.to_dict(), prefix)  # again with the class's defaults filled in
    return text


SIZE_FIELDS = (
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "max_position_embeddings",
    "sliding_window",
)
"""Sizes a decoder config may leave unset (its class then supplies a default), but never set below 1."""


def check_sizes(path: Path, config: dict[str, Any], prefix: str = "", *, complete: bool = True) -> None:
    """Refuse a (text) config no model can have: a size of 0, negative or not a whole number, heads
    that do not divide the width. transformers builds such a config without a word (a hidden_size
    of 0 passed every check of the mask probe). `prefix` names where the fields sit (`text_config.`);
    `complete`: the class's defaults are filled in, so an unset head_dim is really unset."""

    def refuse(field: str, why: str) -> None:
        raise InputError(f"{path}: field '{prefix}{field}' {why}")

    for name in SIZE_FIELDS:
        value = config.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            refuse(name, f"must be a whole number, got {shown(value)}")
        if value < 1:
            refuse(name, f"must be >= 1, got {value}")
    heads, kv, hidden = config.get("num_attention_heads"), config.get("num_key_value_heads"), config.get("hidden_size")
    if heads and kv and heads % kv:
        refuse("num_key_value_heads", f"{kv} does not divide num_attention_heads {heads}")
    if complete and heads and hidden and config.get("head_dim") is None and hidden % heads:
        refuse("num_attention_heads", f"{heads} does not divide hidden_size {hidden} (and head_dim is unset)")
