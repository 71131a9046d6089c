"""Reading a cluster file's YAML with bounds, so that a hostile or mistaken file costs milliseconds.

- Size: a lab file is kilobytes; one over MAX_FILE_BYTES is refused before it is read.
- Alias expansion: YAML aliases share one node, so ten nested lists of ten aliases ("billion
  laughs") are a few hundred lines that become 10^10 values once something walks them (validation,
  hashing, printing an error). The node graph is measured before anything is built: its size with
  every alias counted each time it is used must stay under MAX_NODES, and an alias inside its own
  anchor (a structure holding itself) is refused.
- Keys: two equal keys in one mapping are an error (PyYAML silently keeps the last).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from probes.result import InputError, shown

MAX_FILE_BYTES = 2 * 1024 * 1024
"""A cluster file larger than this is refused unread (real ones are a few kilobytes)."""
MAX_NODES = 100_000
"""YAML nodes a file may expand to, aliases counted at each use (real files: hundreds)."""
_MAX_LINE = 300
"""PyYAML's own messages quote the document; a line of an error is cut to this."""


def read_yaml(path: Path) -> Any:
    """The document in `path`, or InputError (one line naming the file) for anything unreadable."""
    name = path.name
    if not path.is_file():
        raise InputError(f"{path}: no such cluster file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputError(
            f"{name}: {size} bytes, over the {MAX_FILE_BYTES}-byte limit of a cluster file (is it the right file?)"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        bad = exc.object[exc.start : exc.start + 1]
        raise InputError(f"{name}: not UTF-8 text (byte {exc.start}: {bad!r})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the cluster file: {exc.strerror or exc}") from None
    loader = _UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expansion(name, node)
        return loader.construct_document(node)
    except InputError:
        raise
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: malformed YAML: {' '.join(str(exc).split())[:_MAX_LINE]}") from None
    except ValueError as exc:  # PyYAML's int() of a scalar Python refuses (over 4,300 digits)
        raise InputError(f"{name}: malformed YAML: {' '.join(str(exc).split())[:_MAX_LINE]}") from None
    except RecursionError:
        raise InputError(f"{name}: malformed YAML: nested too deeply") from None
    finally:
        loader.dispose()


def _check_expansion(name: str, root: yaml.Node) -> None:
    """Count the nodes `root` expands to (shared nodes once per use) without expanding anything."""
    sizes: dict[int, int] = {}  # id(node) -> expanded size, once known
    open_: set[int] = set()  # nodes whose children are being counted: meeting one again is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if children_done:
            open_.discard(key)
            sizes[key] = 1 + sum(sizes[id(c)] for c in _children(node))
            if sizes[key] > MAX_NODES:
                raise InputError(
                    f"{name}: line {node.start_mark.line + 1}: the YAML expands to more than "
                    f"{MAX_NODES} values through its aliases (&anchor/*alias); refused"
                )
            continue
        if key in sizes:
            continue
        if key in open_:
            raise InputError(
                f"{name}: line {node.start_mark.line + 1}: a YAML alias refers to a value that contains it; refused"
            )
        open_.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML keeps the last of two equal keys silently; a lab file with two `hosts:` is an error."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                hash(key)
            except TypeError:  # `? [a, b]`: a list as a key; `key in seen` would raise a bare TypeError
                raise yaml.constructor.ConstructorError(
                    None, None, f"a {type(key).__name__} cannot be a key", key_node.start_mark
                ) from None
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
