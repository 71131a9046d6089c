"""Stacks: several variants of the step at once, `--variant a+b+c` (probes.step.variants.catalog names the pieces).

A lab changes its training once, with every change that pays, and the changes do not simply add
(on an H200, fused AdamW is worth under 1% alone and much more on top of compile and bf16 adapters):
only measuring the stack says what it gives. A stack is one Variant whose pieces are its members'
pieces; its canonical name is its members sorted and joined by `+`, so the same stack has one name
in the store whatever order it was asked in. Two members that set the same piece to different values
(bf16-autocast keeps fp32 adapters, bf16-adapters casts them to bf16; two CE chunks) conflict: the
stack is refused in one line naming both and the piece. `baseline` is no change and is not a member.

`imported("pkg.mod:NAME")` is a lab's own Variant object (or a test's, e.g. a deliberately broken one).
"""

from __future__ import annotations

import dataclasses
import importlib

from probes.result import FieldError
from probes.step.variants import catalog, names

PIECES = {
    "autocast_dtype": "the autocast dtype",
    "adapter_dtype": "the adapter dtype",
    "gradient_checkpointing": "gradient checkpointing",
    "ce_chunk": "the CE chunk",
    "micro_batch": "the micro-batch",
    "compile_mode": "the compile mode",
    "prepare": "a lab change",  # never a conflict: lab changes compose (Prepares)
}
"""Pieces one value of which a stack can hold, named for the conflict's message."""
FLAGS = ("fused_adamw", "compile", "liger", "float8", "float8_frozen")
"""Pieces that are on when any member turns them on."""


def get(name: str) -> catalog.Variant:
    """The Variant a `--variant` value names: a stack (`a+b`), a lab's (`pkg.mod:NAME`) or a single."""
    if "+" in name:
        return compose(name)
    name = names.member(name)
    if ":" in name:
        return imported(name)
    return catalog.get(name)


def parse(asked: tuple[str, ...]) -> tuple[catalog.Variant, ...]:
    """The Variants `--variant` values name, resolved once (a probe's Config does it): baseline first and
    once, order kept, a stack under its canonical name (members sorted), duplicates dropped."""
    found = {v.name: v for v in map(get, asked)}  # a repeated name keeps its first place
    return (catalog.BASELINE_VARIANT, *(v for name, v in found.items() if name != catalog.BASELINE))


def members(name: str) -> list[str]:
    """The member names of a stack name, canonical order (sorted), duplicates dropped; FieldError on
    an empty member or `baseline` inside a stack."""
    return names.members(name, known=catalog.known())


def canonical(name: str) -> str:
    return "+".join(members(name))


def _show(value: object) -> str:
    if value is None:
        return "no autocast"
    return str(value).removeprefix("torch.")


def compose(name: str) -> catalog.Variant:
    """The Variant doing every member's change; FieldError naming the first conflict."""
    parts = [get(m) for m in members(name)]
    if len(parts) == 1:
        return parts[0]
    fields: dict = {}
    setter: dict[str, str] = {}
    for part in parts:
        for piece in PIECES:
            value, default = getattr(part, piece), getattr(catalog.BASELINE_VARIANT, piece)
            if value is default or value == default == catalog.KEEP or (piece != "autocast_dtype" and value is None):
                continue
            if piece == "prepare" and piece in fields:  # lab changes compose: each runs, in member order
                fields[piece], setter[piece] = Prepares((*_prepares(fields[piece]), value)), part.name
                continue
            if piece in fields and fields[piece] != value:
                raise FieldError(
                    "variant",
                    f"{'+'.join(p.name for p in parts)!r}: {setter[piece]} and {part.name} conflict: both set "
                    f"{PIECES[piece]} ({_show(fields[piece])} vs {_show(value)})",
                )
            fields[piece], setter[piece] = value, part.name
        fields.update({flag: True for flag in FLAGS if getattr(part, flag)})
    if fields.get("float8") and fields.get("float8_frozen"):
        raise FieldError(
            "variant",
            f"{'+'.join(p.name for p in parts)!r}: float8 and float8-frozen conflict: both set the frozen base's GEMMs",
        )
    caveat = " | ".join(f"{p.name}: {p.caveat}" for p in parts)
    return catalog.Variant("+".join(p.name for p in parts), caveat, **fields)


@dataclasses.dataclass(frozen=True)
class Prepares:
    """Several lab variants' own changes, made one after another (equal when the same functions are)."""

    steps: tuple

    def __call__(self, model) -> None:
        for step in self.steps:
            step(model)


def _prepares(value) -> tuple:
    return value.steps if isinstance(value, Prepares) else (value,)


def add(stack: catalog.Variant, addition: catalog.Variant) -> catalog.Variant:
    """The stack doing `stack`'s changes and `addition`'s, composed from their members' names (so its name
    and caveat are those of the same stack asked for by name); FieldError on a conflict."""
    return compose(f"{stack.name}+{addition.name}")


def compatible(stack: catalog.Variant, addition: catalog.Variant) -> str | None:
    """None when `stack` and `addition` compose, else the conflict's message."""
    try:
        add(stack, addition)
    except FieldError as exc:
        return exc.message
    return None


def imported(name: str) -> catalog.Variant:
    """The Variant object `pkg.mod:NAME` names (its name must be that path, so the store's row says
    where it came from); FieldError when it does not import or is not a Variant."""
    path, _, attr = name.partition(":")
    try:
        found = getattr(importlib.import_module(path), attr)
    except Exception as exc:  # the lab's module: any error at import is its own
        raise FieldError("variant", f"{name!r} does not import: {type(exc).__name__}: {exc}") from None
    if not isinstance(found, catalog.Variant):
        raise FieldError("variant", f"{name!r} is a {type(found).__name__}, not a probes.step.variants.catalog.Variant")
    return dataclasses.replace(found, name=name)
