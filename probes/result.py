"""The probe contract: what every probe returns, and how its Config is described.

A probe is a module with a frozen keyword-only `Config` dataclass and `run(config) -> ProbeResult`.
Tables are lists of dataclass rows (units in the field names); `summary` is the headline;
`checks` are pass/fail assertions; `artifacts` are raw text files kept as evidence.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
import math
import os
import re
import reprlib
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError


class InputError(ValueError):
    """A user error: bad file, record, field or value. The CLI prints it on one line, exit 2."""


class FieldError(InputError):
    """A Config field holds a value it cannot take.

    `field` is the field's name and `message` says what is wrong, in no edge's spelling: each edge
    shows it in the words the value came from (`--lora-rank` on the command line,
    `plans.p[1].config.lora_rank` in cluster.yaml, `lora_rank` from Python). Fields a message
    mentions are written in backticks (`` `steps` ``) so every edge can spell them its way; a message
    that does not mention its own field is a predicate put after the field's name.
    """

    def __init__(self, field: str, message: str):
        self.field, self.message = field, message
        super().__init__(self.line(str))

    def __reduce__(self):  # pickled whole (a Ray task's exception), not from the one-line args
        return (FieldError, (self.field, self.message))

    def text(self, spell: Callable[[str], str]) -> str:
        """The message with every field it mentions spelled by `spell`."""
        return _MENTION.sub(lambda m: spell(m.group(1)), self.message)

    def line(self, spell: Callable[[str], str]) -> str:
        """One line naming the field as `spell` spells it: `--seq-len must be >= 2, got 1`."""
        if f"`{self.field}`" in self.message:
            return self.text(spell)
        return f"{spell(self.field)} {self.text(spell)}"


_MENTION = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
SHOWN_CHARS = 80
SPREAD_LIMIT_PCT = 2.0
"""Above this spread, (max - min) / median of repeated timings, a median is not yet a number: the probes'
timing and the runner's drift and answers all read this one value."""
"""A value quoted in an error line is cut to about this many characters (a 10 MB string is not a line)."""


def shown(value: Any) -> str:
    """repr(value) for an error line, about SHOWN_CHARS characters at most, computed without walking
    all of a huge value (reprlib stops early in long strings and deep or long containers)."""
    try:
        text = _SHORT_REPR.repr(value)
    except ValueError:  # an int of more digits than Python will print
        text = f"<{type(value).__name__} too long to show>"
    return text if len(text) <= SHOWN_CHARS else f"{text[: SHOWN_CHARS - 3]}..."


_SHORT_REPR = reprlib.Repr()
for _name in ("maxtuple", "maxlist", "maxarray", "maxdict", "maxset", "maxfrozenset", "maxdeque"):
    setattr(_SHORT_REPR, _name, 4)
_SHORT_REPR.maxlevel = 3
_SHORT_REPR.maxstring = _SHORT_REPR.maxlong = _SHORT_REPR.maxother = SHOWN_CHARS


@dataclasses.dataclass(frozen=True, kw_only=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclasses.dataclass(kw_only=True)
class ProbeResult:
    probe: str
    config: Any
    tables: dict[str, list[Any]] = dataclasses.field(default_factory=dict)
    summary: dict[str, Any] = dataclasses.field(default_factory=dict)
    checks: list[Check] = dataclasses.field(default_factory=list)
    artifacts: dict[str, str] = dataclasses.field(default_factory=dict)
    """File name -> raw text (an unedited profiler table, raw timings)."""

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def records(self, table: str) -> list[dict[str, Any]]:
        return [row_to_dict(r) for r in self.tables[table]]

    def to_json_dict(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "config": config_to_dict(self.config),
            "summary": to_jsonable(self.summary),
            "tables": {name: to_jsonable(self.records(name)) for name in self.tables},
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }


def row_to_dict(row: Any) -> dict[str, Any]:
    return dataclasses.asdict(row) if dataclasses.is_dataclass(row) else dict(row)


def to_jsonable(value: Any) -> Any:
    """JSON has no NaN or Path: NaN becomes null, paths and tuples become plain values."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return to_jsonable(value.item())
    return value


def plain(value: Any) -> Any:
    """numpy scalars as Python values; NaN as None."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


SUMMARY_FIGURES_MAX = 8
"""Scalar summary figures shown for a probe whose answer is its summary."""


def summary_figures(summary: dict[str, Any]) -> dict[str, Any]:
    """The first scalar figures of a summary: the answer of a probe without a table to read."""
    scalars = {k: v for k, v in summary.items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return dict(list(scalars.items())[:SUMMARY_FIGURES_MAX])


def summary_answer(probe: str) -> tuple[str, tuple[str, ...], bool, None, Any]:
    """(QUESTION, TABLES, EXACT, RATIO_OF, figures) of a probe whose answer is its summary's first figures."""

    def figures(tables: dict, summary: dict[str, Any], config: dict) -> tuple[list[dict], list[str]]:
        return [summary_figures(summary)], []

    return f"{probe}: the summary's figures", (), False, None, figures


def config_to_dict(config: Any) -> dict[str, Any]:
    return to_jsonable(dataclasses.asdict(config))


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field: the one place a field is documented.

    Inherited fields keep their base class's doc unless the class redeclares them with its own."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            docs.update(_own_field_docs(klass))
    return docs


def _own_field_docs(cls: type) -> dict[str, str]:
    source = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(source).body[0].body
    docs: dict[str, str] = {}
    for node, nxt in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


MAX_JSON_BYTES = 64 * 2**20
"""A labprobe `--json` output is kilobytes; more than this is another file (or /dev/zero), never read whole."""


def loads(text: str | bytes) -> Any:
    """json.loads, where nesting too deep for its parser (a file of 100,000 `[`) is a JSONDecodeError like
    any malformed JSON: json raises RecursionError, which no reader's `except ValueError` catches."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", text if isinstance(text, str) else "", 0) from None


def read_json_file(path: Path, what: str) -> Any:
    """The JSON held in `path`, `what` naming the file's kind in the error: an unreadable, empty, malformed
    or oversized file is an InputError of one line (an empty file is said so, not as json's 'Expecting
    value'). Opened without blocking, so a FIFO nobody writes reads as empty instead of hanging; a pipe
    that is written (`--profile <(...)`) is read as it comes."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        os.set_blocking(fd, True)  # only the open must not wait for a writer
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(MAX_JSON_BYTES + 1)
        text = data.decode("utf-8")
    except OSError as exc:  # a folder, no such file (strerror: the fd number str(exc) names says nothing)
        raise InputError(f"{path}: unreadable {what}: {exc.strerror or exc}") from None
    except ValueError as exc:  # bytes that are not UTF-8
        raise InputError(f"{path}: unreadable {what}: {exc}") from None
    if len(data) > MAX_JSON_BYTES:
        raise InputError(f"{path}: unreadable {what}: larger than {MAX_JSON_BYTES // 2**20} MiB")
    if not text.strip():
        raise InputError(f"{path}: unreadable {what}: the file is empty")
    try:
        return loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: unreadable {what}: {exc}") from None


def table_rows(tables: dict[str, Any], name: str, source: str) -> list[dict[str, Any]]:
    """The rows of table `name` among a `--json` result's `tables` ([] where it has none); InputError naming
    `source` where the table is not a list of rows (a hand-edited or garbled file)."""
    rows = tables.get(name)
    if rows is None:
        return []
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise InputError(f"{source}: table {name!r} is not a list of rows")
    return rows


def require(condition: bool, field: str, message: str) -> None:
    """Raise FieldError(field, message) unless condition: a Config's own checks, in __post_init__.

    `message` follows FieldError's convention: other fields in backticks, no option spelling."""
    if not condition:
        raise FieldError(field, message)


def make_config(cls: type, values: dict[str, Any]) -> Any:
    """The one way a Config is built from outside values: CLI strings and cluster.yaml values alike.

    Unknown fields, then each field's type (pydantic, lax: the string "4096" is the int 4096), then
    the Config's own checks; any problem is a FieldError naming the field (InputError otherwise)."""
    names = [f.name for f in dataclasses.fields(cls)]
    for key in values:
        if key not in names:
            # a probe's Config lives in its package (probes.profile.config, or probes.padding.probe itself)
            probe = cls.__module__.split(".")[1 if cls.__module__.count(".") > 1 else -1]
            raise FieldError(key, f"is not a field of probe {probe!r} (fields: {', '.join(names)})")
    try:
        return _adapter(cls).validate_python(values)
    except ValidationError as exc:
        raise _as_field_error(exc) from None
    except TypeError as exc:  # a Config check that met a type pydantic let through
        raise InputError(" ".join(str(exc).split())) from None


_ADAPTERS: dict[type, TypeAdapter] = {}


def _adapter(cls: type) -> TypeAdapter:
    if cls not in _ADAPTERS:
        _ADAPTERS[cls] = TypeAdapter(cls)
    return _ADAPTERS[cls]


def _as_field_error(exc: ValidationError) -> InputError:
    err = exc.errors()[0]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, InputError):  # raised by the Config's own checks; pydantic wrapped it
        return cause
    field = str(err["loc"][0]) if err["loc"] else ""
    if err["type"] == "missing":
        return FieldError(field, "is required")
    message = err["msg"].removeprefix("Input ")
    message = message if message != err["msg"] else f"is wrong: {message[:1].lower()}{message[1:]}"
    return FieldError(field, f"{message} (got {shown(err.get('input'))})")
