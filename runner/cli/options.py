"""Derive argparse options from a probe's Config dataclass, so a field is documented only once.

argparse only splits the command line into strings: the values are checked by the one validation
path every Config goes through (`probes.result.make_config`, also used for cluster.yaml), and its
FieldError is shown here in the command line's words (`--lora-rank must be >= 1, got 0`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from probes.result import FieldError, InputError, field_docs, make_config


class OneLineParser(argparse.ArgumentParser):
    """Bad CLI values get one line naming the problem, exit 2 (argparse prints usage too)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


def add_config_options(parser: argparse.ArgumentParser, config_cls: type) -> None:
    hints = typing.get_type_hints(config_cls)
    docs = field_docs(config_cls)
    for field in dataclasses.fields(config_cls):
        kwargs = _argparse_kwargs(hints[field.name])
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        default = None if required else _default(field)
        help_text = docs.get(field.name, "")
        if not required and default is not None and kwargs.get("action") is not argparse.BooleanOptionalAction:
            help_text += f" (default: {_show(default)})"
        # argparse %-formats help strings (for %(default)s): a literal % in a field doc must be doubled
        parser.add_argument(
            option_name(field.name),
            dest=field.name,
            required=required,
            default=argparse.SUPPRESS,
            help=help_text.replace("%", "%%"),
            **kwargs,
        )


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    return field.default_factory()


def _show(value: Any) -> str:
    if isinstance(value, (tuple, list)):
        return " ".join(str(v) for v in value)
    return str(value)


def _argparse_kwargs(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        inner = [a for a in args if a is not type(None)]
        assert len(inner) == 1, f"unsupported Config annotation {hint}"
        return _argparse_kwargs(inner[0])
    if hint is bool:
        return {"action": argparse.BooleanOptionalAction}
    if origin is typing.Literal:  # shown in --help; make_config checks the value
        return {"metavar": "{" + ",".join(str(a) for a in args) + "}"}
    if origin is tuple:
        return {"nargs": "+", "action": "extend", "metavar": _metavar(args[0])}
    return {"metavar": _metavar(hint)}


def _metavar(hint: Any) -> str:
    assert hint in (Path, int, float, str), f"unsupported Config annotation {hint}"
    return {Path: "PATH", int: "INT", float: "FLOAT", str: "TEXT"}[hint]


def build_config(config_cls: type, namespace: argparse.Namespace) -> Any:
    """Config from parsed options (strings), through the one validation path; errors name the option."""
    values = {f.name: getattr(namespace, f.name) for f in dataclasses.fields(config_cls) if hasattr(namespace, f.name)}
    with options_named():
        return make_config(config_cls, values)


@contextlib.contextmanager
def options_named() -> Iterator[None]:
    """A FieldError raised inside (building the Config, or by the probe's run) becomes an InputError
    in the command line's words."""
    try:
        yield
    except FieldError as exc:
        raise InputError(exc.line(option_name)) from None


def plot_file(text: str) -> Path:
    """argparse type of --plot: a file matplotlib can write by its suffix, not a folder."""
    path = Path(text)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a .png, .svg or .pdf file name")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name")
    return path
