"""A plan entry's probe Config: the entry's `config` plus the fields the runner fills per job.

The values go through the one validation path every probe Config takes (`probes.result.make_config`,
the same as `labprobe probe`'s options), and a FieldError is shown in the file's words:

    cluster.yaml: plans.p[1].config.lora_rank: must be >= 1, got 0
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import probes
from probes.result import FieldError, InputError, make_config

RUNNER_FIELDS = ("checkpoint", "corpus", "tokenizer", "weights")
"""Probe Config fields the runner fills per job from the cluster file; a plan's `config` may not set them."""

_ENTRY_KEY = {"checkpoint": "checkpoints", "weights": "checkpoints", "corpus": "corpus", "tokenizer": "corpus"}
"""The plan entry's key a runner-filled field comes from: where the file should be changed."""


def field_error_line(where: str, config: dict[str, Any], exc: FieldError) -> str:
    """A FieldError in the file's words, at the key the value came from: the entry's `config`
    (`plans.p[1].config.lora_rank: must be >= 1, got 0`), or the entry key a runner field is filled from."""
    key = f"config.{exc.field}" if exc.field in config else _ENTRY_KEY.get(exc.field, f"config.{exc.field}")
    return f"{where}.{key}: {exc.text(str)}"


def build_probe_config(
    probe: str,
    config: dict[str, Any],
    *,
    placeholders: bool = False,
    corpus: str | None = None,
    filled: dict[str, Any] | None = None,
) -> Any:
    """The probe's Config from a plan's `config` plus the runner-filled fields.

    With `placeholders`, the runner fields get stand-in paths: this checks a plan without touching
    any host (`labprobe validate`). Raises FieldError naming the Config field, InputError otherwise.
    """
    cls = probes.config_class(probe)
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key in config:
        if key in RUNNER_FIELDS:
            raise FieldError(key, "is set by the runner from the plan's checkpoints/corpus; remove it here")
    values = dict(config)
    runner = filled if filled is not None else _placeholders(corpus) if placeholders else {}
    for key, value in runner.items():
        if key in fields:
            values[key] = _runner_value(key, value, hints[key])
    missing = [k for k in RUNNER_FIELDS if k in fields and k not in values and _required(fields[k])]
    if missing:
        raise InputError(f"probe {probe!r} needs {', '.join(missing)}: name a corpus in the entry")
    return make_config(cls, values)


def _runner_value(key: str, value: Any, hint: Any) -> Any:
    """A runner-filled value in the probe's terms: a family probe (`checkpoint: tuple[Path, ...]`)
    gets a one-checkpoint family; the probes call local weights "checkpoint"."""
    if typing.get_origin(hint) is tuple and not isinstance(value, (tuple, list)):
        return (value,)
    if key == "weights" and value == "local":
        return "checkpoint"
    return value


def _required(field: dataclasses.Field) -> bool:
    return field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING


def _placeholders(corpus: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {"checkpoint": Path("checkpoint"), "tokenizer": Path("tokenizer"), "weights": "random"}
    if corpus is not None:
        out["corpus"] = Path("corpus.jsonl")
    return out
