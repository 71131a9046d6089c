"""Reading a corpus file into records, for probes.corpus.lengths (which tokenizes them and caches the lengths).

A corpus is JSONL or Parquet; each record holds `messages` (chat turns: a non-empty list of
{role, content} strings) or `text`, and optionally `source`. Nothing is tokenized here: the records
come back as texts and conversations, each with its source and how an error names it.

Every user error raises InputError naming the file, the record (1-based, with its JSONL line) and
the field.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from probes.result import InputError, loads

DEFAULT_SOURCE = "default"


@dataclasses.dataclass
class Records:
    """Parsed corpus: each item is a text (str) or a conversation (list of turns)."""

    path: Path
    items: list[str | list[dict[str, Any]]]
    sources: list[str]
    numbers: list[int]  # how an error names each record: its 1-based record number
    lines: list[int] | None = None  # JSONL: the line each record came from

    def where(self, i: int) -> str:
        line = f" (line {self.lines[i]})" if self.lines else ""
        return f"{self.path}: record {self.numbers[i]}{line}"


def read_corpus(path: Path) -> Records:
    if not path.is_file():
        raise InputError(f"{path}: no such corpus file")
    records = _read_parquet_corpus(path) if is_parquet(path) else _read_jsonl_corpus(path)
    if not records.items:
        raise InputError(f"{path}: empty corpus (no records)")
    return records


def _read_jsonl_corpus(path: Path) -> Records:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(
            f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        ) from None
    records = Records(path=path, items=[], sources=[], numbers=[], lines=[])
    # split on "\n" only: str.splitlines() also splits on U+2028 and friends, which JSON strings may hold
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        number = len(records.items) + 1
        try:
            record = loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(
                f"{path}: record {number} (line {line_no}): malformed JSON: {exc.msg} (column {exc.colno})"
            ) from None
        records.lines.append(line_no)
        records.numbers.append(number)
        _add_record(records, record)
    return records


def _read_parquet_corpus(path: Path) -> Records:
    try:
        table = read_parquet(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: unreadable Parquet corpus: {str(exc).splitlines()[0]}") from None
    if not {"messages", "text"} & set(table.column_names):
        raise InputError(
            f"{path}: neither field 'messages' nor 'text' is present (columns: {', '.join(table.column_names)})"
        )
    columns = {n: table.column(n).to_pylist() for n in ("messages", "text", "source") if n in table.column_names}
    records = Records(path=path, items=[], sources=[], numbers=[])
    for i in range(table.num_rows):
        records.numbers.append(i + 1)
        _add_record(records, {n: values[i] for n, values in columns.items()})
    return records


def _add_record(records: Records, record: Any) -> None:
    i = len(records.items)
    where = records.where(i)
    if not isinstance(record, dict):
        raise InputError(f"{where}: not a JSON object")
    messages, text, source = record.get("messages"), record.get("text"), record.get("source")
    if messages is not None:
        records.items.append(_checked_messages(messages, where))
    elif text is not None:
        if not isinstance(text, str):
            raise InputError(f"{where}: field 'text' must be a string, got {type(text).__name__}")
        records.items.append(text)
    else:
        raise InputError(f"{where}: record has neither 'messages' nor 'text'")
    if source is not None and not isinstance(source, str):
        raise InputError(f"{where}: field 'source' must be a string, got {type(source).__name__}")
    records.sources.append(source or DEFAULT_SOURCE)


def _checked_messages(messages: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise InputError(f"{where}: field 'messages' must be a non-empty list of turns")
    for t, turn in enumerate(messages):
        if not isinstance(turn, dict) or not isinstance(turn.get("role"), str):
            raise InputError(f"{where}: field 'messages[{t}].role' must be a string")
        if not isinstance(turn.get("content"), str):
            raise InputError(f"{where}: field 'messages[{t}].content' must be a string")
    return messages


def read_parquet(path: Path, **kwargs) -> pa.Table:
    # ParquetFile, not pq.read_table: the latter imports pyarrow.dataset (~0.2 s of a 1 s CLI run)
    return pq.ParquetFile(path, **kwargs).read()


def is_parquet(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"PAR1"
