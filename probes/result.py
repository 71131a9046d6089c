"""The probe contract: what every probe returns, and how its Config is described.

A probe is a module with a frozen keyword-only `Config` dataclass and `run(config) -> ProbeResult`.
Tables are lists of dataclass rows (units in the field names); `summary` is the headline;
`checks` are pass/fail assertions; `artifacts` are raw text files kept as evidence.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import math
import textwrap
from pathlib import Path
from typing import Any


class InputError(ValueError):
    """A user error: bad file, record, field or value. The CLI prints it on one line, exit 2."""


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
            "summary": _jsonable(self.summary),
            "tables": {name: _jsonable(self.records(name)) for name in self.tables},
            "checks": [dataclasses.asdict(c) for c in self.checks],
        }


def row_to_dict(row: Any) -> dict[str, Any]:
    return dataclasses.asdict(row) if dataclasses.is_dataclass(row) else dict(row)


def _jsonable(value: Any) -> Any:
    """JSON has no NaN or Path: NaN becomes null, paths and tuples become plain values."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def config_to_dict(config: Any) -> dict[str, Any]:
    return _jsonable(dataclasses.asdict(config))


def field_docs(cls: type) -> dict[str, str]:
    """The docstring written under each dataclass field: the one place a field is documented."""
    source = textwrap.dedent(inspect.getsource(cls))
    body = ast.parse(source).body[0].body
    docs: dict[str, str] = {}
    for node, nxt in zip(body, body[1:]):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(nxt, ast.Expr)
            and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)
        ):
            docs[node.target.id] = " ".join(nxt.value.value.split())
    return docs


def require(condition: bool, message: str) -> None:
    """Raise InputError(message) unless condition: for validating Config fields at the edge."""
    if not condition:
        raise InputError(message)
