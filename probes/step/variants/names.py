"""Variant and stack names as the store keeps them, without torch (`labprobe compare --variant` reads them).

One stack has one name: its members sorted and joined by `+`, each without surrounding blanks, a CE chunk
or a micro-batch without leading zeros, each once. probes.step.variants.stacks builds the stacks these names name."""

from __future__ import annotations

import re

from probes.result import FieldError

BASELINE = "baseline"
CE_CHUNK = re.compile(r"ce-chunk=([0-9]{1,12})")
"""ASCII digits only (a regex digit class takes any script's), and few enough for `int` (it refuses over 4,300)."""
MICRO_BATCH = re.compile(r"micro-batch=([0-9]{1,12})")
"""Rows per micro-batch, the same digits as a CE chunk."""


def member(name: str) -> str:
    """One name as the store keeps it: no surrounding blanks, a CE chunk or a micro-batch without leading zeros."""
    name = name.strip()
    for pattern, prefix in ((CE_CHUNK, "ce-chunk="), (MICRO_BATCH, "micro-batch=")):
        if match := pattern.fullmatch(name):
            return f"{prefix}{int(match.group(1))}"
    return name


def members(name: str, known: str = "") -> list[str]:
    """The member names of a stack name, canonical order (sorted), duplicates dropped; FieldError on an empty
    member or `baseline` inside a stack (`known`: the names to list when a single name is empty)."""
    parts = [member(p) for p in name.split("+")]
    if any(not p for p in parts):
        why = "an empty member (write a+b+c)" if "+" in name else f"empty (known: {known})" if known else "empty"
        raise FieldError("variant", f"{name!r}: {why}")
    if BASELINE in parts and len(parts) > 1:
        raise FieldError("variant", f"{name!r}: baseline is no change, leave it out of a stack")
    return sorted(dict.fromkeys(parts))


def canonical(name: str) -> str:
    return "+".join(members(name))
