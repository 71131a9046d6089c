"""Derive argparse options from a probe's Config dataclass, so a field is documented only once."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from pathlib import Path
from typing import Any

from probes.result import InputError, field_docs


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
        parser.add_argument(
            option_name(field.name), dest=field.name, required=required,
            default=argparse.SUPPRESS, help=help_text, **kwargs,
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
    if origin is typing.Literal:
        return {"choices": list(args), "type": type(args[0])}
    if origin is tuple:
        item = args[0]
        return {"nargs": "+", "action": "extend", "type": _scalar(item), "metavar": item.__name__.upper()}
    return {"type": _scalar(hint)}


def _scalar(hint: Any):
    if hint is Path:
        return Path
    if hint in (int, float, str):
        return hint
    raise AssertionError(f"unsupported Config annotation {hint}")


def build_config(config_cls: type, namespace: argparse.Namespace) -> Any:
    """Config from parsed options; tuples stay tuples; errors name the option."""
    hints = typing.get_type_hints(config_cls)
    values = {}
    for field in dataclasses.fields(config_cls):
        if hasattr(namespace, field.name):
            value = getattr(namespace, field.name)
            if typing.get_origin(hints[field.name]) is tuple and value is not None:
                value = tuple(value)
            values[field.name] = value
    try:
        return config_cls(**values)
    except TypeError as exc:  # a wrong type that argparse could not catch
        raise InputError(str(exc)) from None


def plot_file(text: str) -> Path:
    """argparse type of --plot: a file matplotlib can write by its suffix, not a folder."""
    path = Path(text)
    if path.suffix.lower() not in (".png", ".svg", ".pdf"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a .png, .svg or .pdf file name")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name")
    return path
