"""Derive argparse options from a probe's Config dataclass, so a field is documented only once.

argparse only splits the command line into strings: the values are checked by the one validation
path every Config goes through (`probes.result.make_config`, also used for cluster.yaml), and its
FieldError is shown here in the command line's words (`--lora-rank must be >= 1, got 0`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from probes.result import FieldError, InputError, field_docs, make_config

METAVARS = {
    "--cluster": "FILE",
    "--crontab-file": "FILE",
    "--plot": "FILE",
    "--store": "DIR",
    "--address": "ADDRESS",
    "--plan": "PLAN",
    "--host": "HOST",
    "--baseline": "HOST",
    "--probe": "PROBE",
    "--table": "TABLE",
    "--metric": "COLUMN",
    "--variant": "NAME",
    "--run": "RUN",
    "--by": "COLUMN",
    "--profile-checkpoint": "NAME",
}
SHORT = {"C": "NAME", "S": "SECONDS", "H": "HOST", "D": "DIR", "F": "FILE", "A": "ADDRESS", "P": "PLAN"}
"""Single-letter placeholders some commands wrote, read as their kind."""
"""One placeholder per kind of value, whatever a command's module wrote (`--cluster F` and `--cluster
CLUSTER` both read `--cluster FILE`); options not named here: SECONDS for a float `-s` option, N for an int."""

RENAMED = {"seq_lens": "fit_lens", "num_steps": "steps", "seeds": "seed"}
"""One name per idea across probes (a Config field -> the option it is spelled as): the lengths of a
step-time fit (profile's seq_lens, replay's fit_lens), a count of steps (carrier's and profile's steps,
replay's num_steps), seeds (one or several, as `--checkpoint` takes one or several). The field's own
spelling stays accepted, hidden from --help, so older command lines still run."""


class OneLineParser(argparse.ArgumentParser):
    """Bad CLI values get one line naming the problem, exit 2 (argparse prints usage too); placeholders
    come from METAVARS, so every command shows the same one for the same kind of value."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)  # `goodput --profile X` must not read as --profile-checkpoint X
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message}\n")

    def add_argument(self, *names, **kwargs):  # type: ignore[override]
        return super().add_argument(*names, **_placeholder(names, kwargs))


def _placeholder(names: tuple, kwargs: dict) -> dict:
    if not names or not str(names[0]).startswith("--") or kwargs.get("help") == argparse.SUPPRESS:
        return kwargs
    if kwargs.get("action") not in (None, "append", "extend"):  # flags take no value
        return kwargs
    name = names[0]
    if name in METAVARS:
        return {**kwargs, "metavar": METAVARS[name]}
    if kwargs.get("metavar") in SHORT:
        return {**kwargs, "metavar": SHORT[kwargs["metavar"]]}
    kind = kwargs.get("type")
    if "metavar" not in kwargs and (
        kind in (positive_seconds, nonneg_seconds) or kind is float and name.endswith("-s")
    ):
        return {**kwargs, "metavar": "SECONDS"}
    if "metavar" not in kwargs and kind in (int, positive_int, nonneg_int, any_int):
        return {**kwargs, "metavar": "N"}
    return kwargs


# -- numbers: the one validator every numeric option goes through ------------------------------
MAX_SECONDS = 1e7
"""The longest duration any option takes (about 116 days): longer ones are typos, and Python's waits
raise OverflowError past about 9.2e9 s."""
MAX_PERCENT = 1e4
MAX_INT = 2**53
"""Counts and lengths above this are typos (and lose exactness as floats further on)."""


class NotANumber(argparse.ArgumentTypeError):
    """The text does not read as a number of the kind at all (as opposed to one out of range)."""


def number(
    kind: type, *, low: float, high: float, low_open: bool = False, what: str = "a number"
) -> Callable[[str], float | int]:
    """An argparse `type` taking `kind` (int: digits only, no 1e3 or 3.5) finite, within
    [low, high] ((low, high] with `low_open`); anything else is one line naming the value."""
    bounds = f"{'>' if low_open else '>='} {low:g} and <= {high if kind is int else format(high, 'g')}"

    def parse(text: str) -> float | int:
        said = f"expected {what} {bounds}, got {text!r}"
        try:
            value = int(text.strip(), 10) if kind is int else float(text)
        except (TypeError, ValueError):
            raise NotANumber(said) from None
        if not math.isfinite(value) or value > high or value < low or (low_open and value == low):
            raise argparse.ArgumentTypeError(said)  # nan fails every comparison: named here, not let through
        if kind is not int and 0 < abs(value) < sys.float_info.min:  # 5e-324 s priced every figure nan
            raise argparse.ArgumentTypeError(f"{said}: below the smallest normal float, {sys.float_info.min:g}")
        return value

    parse.__name__ = what  # argparse names a type by it
    return parse


positive_float = number(float, low=0.0, high=1e15, low_open=True, what="a finite number")
nonneg_float = number(float, low=0.0, high=1e15, what="a finite number")
finite_float = number(float, low=-1e15, high=1e15, what="a finite number")
positive_seconds = number(float, low=0.0, high=MAX_SECONDS, low_open=True, what="a finite number of seconds")
nonneg_seconds = number(float, low=0.0, high=MAX_SECONDS, what="a finite number of seconds")
percent = number(float, low=0.0, high=MAX_PERCENT, what="a finite percentage")
positive_int = number(int, low=1, high=MAX_INT, what="a whole number")
nonneg_int = number(int, low=0, high=MAX_INT, what="a whole number")
any_int = number(int, low=-MAX_INT, high=MAX_INT, what="a whole number")
days = number(float, low=0.0, high=36500.0, what="a finite number of days")

FIELD_TYPES: dict[str, Callable[[str], float | int]] = {
    "fit_max_len": positive_int,
    "fit_min_len": positive_int,
    "fit_batch_size": positive_int,
    "token_budget": positive_int,
    "num_arms": positive_int,
    "num_seeds": positive_int,
    "batch_size": positive_int,
    "max_length": positive_int,
    "seed": nonneg_int,
}
"""Config fields whose option takes a narrower range than its type's (the Config checks the rest);
besides these, a float field named `*_s` takes nonneg_seconds, `*_pct` a percent, any other float a
finite number, an int field a whole number."""


def _in_range_if_a_number(parse: Callable[[str], float | int]) -> Callable[[str], Any]:
    """A Config option's type: a number is checked by `parse` (finite, in range); text that is no number
    of the kind goes on as it is, to the Config's own type check, which says it as cluster.yaml's does."""

    def check(text: str) -> Any:
        try:
            return parse(text)
        except NotANumber:
            return text

    check.__name__ = parse.__name__
    return check


def _number_type(name: str, hint: Any) -> Callable[[str], float | int] | None:
    if name in FIELD_TYPES:
        return FIELD_TYPES[name]
    if hint is float:
        return nonneg_seconds if name.endswith("_s") else percent if name.endswith("_pct") else finite_float
    return any_int if hint is int else None


def option_name(field_name: str) -> str:
    return "--" + RENAMED.get(field_name, field_name).replace("_", "-")


def add_config_options(parser: argparse.ArgumentParser, config_cls: type, *, exclude: tuple[str, ...] = ()) -> None:
    """One option per Config field but the `exclude`d ones (a command that sets them itself)."""
    hints = typing.get_type_hints(config_cls)
    docs = field_docs(config_cls)
    for field in (f for f in dataclasses.fields(config_cls) if f.name not in exclude):
        kwargs = _argparse_kwargs(hints[field.name])
        numeric = _number_type(field.name, _inner(hints[field.name]))
        if numeric is not None:
            kwargs["type"] = _in_range_if_a_number(numeric)
        required = field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
        default = None if required else _default(field)
        help_text = docs.get(field.name, "")
        if not required and default is not None and kwargs.get("action") is not argparse.BooleanOptionalAction:
            help_text += f" (default: {_show(default)})"
        # argparse %-formats help strings (for %(default)s): a literal % in a field doc must be doubled
        name = option_name(field.name)
        parser.add_argument(
            name,
            dest=field.name,
            required=required,
            default=argparse.SUPPRESS,
            help=help_text.replace("%", "%%"),
            **kwargs,
        )
        if field.name in RENAMED:  # the field's own spelling, still accepted, not shown
            parser.add_argument(
                "--" + field.name.replace("_", "-"),
                dest=field.name,
                default=argparse.SUPPRESS,
                help=argparse.SUPPRESS,
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


def _inner(hint: Any) -> Any:
    """The element type of `X | None` and `tuple[X, ...]` (the type one command-line word becomes)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return _inner(next(a for a in args if a is not type(None)))
    return _inner(args[0]) if origin is tuple else hint


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
    return {Path: "PATH", int: "N", float: "NUMBER", str: "TEXT"}[hint]


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
    try:
        folder = path.is_dir()
    except OSError as exc:  # a name past NAME_MAX: pathlib lets ENAMETOOLONG through
        raise argparse.ArgumentTypeError(f"{text!r}: {(exc.strerror or str(exc)).lower()}") from None
    if folder:
        raise argparse.ArgumentTypeError(f"{text!r} is a folder: give a file name")
    return path


def add_store_options(parser: argparse.ArgumentParser) -> None:
    """--store and --cluster as the commands that read the store (history, report) take them."""
    from runner.cli.stores import add_store_option

    add_store_option(parser)
    parser.add_argument(
        "--cluster",
        type=Path,
        default=Path("cluster.yaml"),
        help="the cluster file naming the store (default: ./cluster.yaml, if present)",
    )
