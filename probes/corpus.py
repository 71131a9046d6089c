"""Corpus -> token lengths, shared by the `padding` and `bucket` probes.

A corpus is JSONL or Parquet; each record holds `messages` (chat turns, rendered with the
tokenizer's own chat template, as training renders them) or `text`, and optionally `source`.
Tokenization uses the checkpoint's own fast tokenizer from a local directory, batched. Lengths are
cached as Parquet under `<cache_dir>/<corpus sha256>-<tokenizer sha256>.parquet`, so a second run
over the same bytes with the same tokenizer reads the cache and never parses or tokenizes. A
lengths file (Parquet or CSV with `length` and optional `source`) skips tokenization entirely.

Every user error raises InputError naming the file, the record (1-based) and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.checkpoint import read_config
from probes.result import InputError, require

DEFAULT_CACHE_DIR = Path("~/.cache/labprobe/lengths")
DEFAULT_SOURCE = "default"
_CACHE_VERSION = b"labprobe-lengths-v1"
_CHUNK = 8192  # records per tokenizer batch: bounded memory, still batched
# Files that decide how text becomes tokens (and so belong in the tokenizer's hash).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "added_tokens.json", "chat_template.jinja", "chat_template.json",
                    "vocab.json", "merges.txt", "tokenizer.model")


@dataclasses.dataclass(frozen=True)
class Lengths:
    """Token lengths of a corpus, one per sample, with each sample's source."""

    length: np.ndarray  # int64 tokens per sample
    source_code: np.ndarray  # int32 index into `sources`
    sources: tuple[str, ...]
    origin: str  # "lengths file", "cache" or "tokenized"

    @property
    def num_samples(self) -> int:
        return int(self.length.size)


def validate_inputs(*, corpus: Path | None, lengths: Path | None, checkpoint: Path | None) -> None:
    """For a probe's __post_init__: exactly one of --corpus and --lengths; a corpus needs a tokenizer."""
    require((corpus is None) != (lengths is None), "give exactly one of --corpus and --lengths")
    require(corpus is None or checkpoint is not None,
            "--corpus needs --checkpoint (the directory holding the tokenizer)")


def load(*, corpus: Path | None, lengths: Path | None, checkpoint: Path | None,
         cache_dir: Path | None) -> Lengths:
    """Lengths from a lengths file, or from the corpus (cached per corpus and tokenizer content)."""
    if lengths is not None:
        return read_lengths_file(lengths)
    assert corpus is not None and checkpoint is not None, "validate_inputs() was skipped"
    if not corpus.is_file():
        raise InputError(f"{corpus}: no such corpus file")
    if cache_dir is None:
        return tokenize_corpus(corpus, checkpoint)
    cache_dir = cache_dir.expanduser()
    digest = corpus_sha256(corpus, cache_dir)
    cache = _cache_file(cache_dir, digest, checkpoint)
    try:
        if cache.is_file():
            result = _from_table(_read_parquet(cache, read_dictionary=["source"]), cache, "cache")
            _remember_or_warn(corpus, cache_dir, digest)
            return result
    except (pa.ArrowInvalid, OSError, InputError):
        pass  # a damaged or unreadable cache entry is rebuilt below, never trusted
    result = tokenize_corpus(corpus, checkpoint)  # raises on bad input before anything is cached
    try:
        _write_atomic(cache, result)
    except OSError as exc:
        # the cache only saves time: a read-only or bad --cache-dir must not lose the run
        _warn(f"cannot write the lengths cache under {cache_dir} ({exc.strerror or exc}); "
              "continuing without it")
        return result
    _remember_or_warn(corpus, cache_dir, digest)
    return result


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _remember_or_warn(corpus: Path, cache_dir: Path, digest: str) -> None:
    try:
        remember_corpus_sha256(corpus, cache_dir, digest)
    except OSError as exc:
        _warn(f"cannot remember the corpus hash under {cache_dir} ({exc.strerror or exc}); "
              "the next run re-reads the corpus")


# ---- lengths files and the cache -------------------------------------------------------------


def read_lengths_file(path: Path) -> Lengths:
    if not path.is_file():
        raise InputError(f"{path}: no such lengths file")
    try:
        if _is_parquet(path):
            table = _read_parquet(path)
        else:
            from pyarrow import csv

            table = csv.read_csv(path, convert_options=csv.ConvertOptions(
                column_types={"source": pa.string()}))
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: unreadable lengths file: {str(exc).splitlines()[0]}") from None
    return _from_table(table, path, "lengths file")


def _read_parquet(path: Path, **kwargs) -> pa.Table:
    # ParquetFile, not pq.read_table: the latter imports pyarrow.dataset (~0.2 s of a 1 s CLI run)
    return pq.ParquetFile(path, **kwargs).read()


def _is_parquet(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(4) == b"PAR1"


def _from_table(table: pa.Table, path: Path, origin: str) -> Lengths:
    """Validate a (length[, source]) table; records are numbered from 1 (CSV line = record + 1)."""
    line = (lambda i: f"record {i + 1} (line {i + 2})") if path.suffix.lower() == ".csv" else (
        lambda i: f"record {i + 1}")
    if table.num_rows == 0:
        raise InputError(f"{path}: empty lengths file (no records)")
    if "length" not in table.column_names:
        raise InputError(f"{path}: field 'length' is missing (columns: {', '.join(table.column_names)})")
    column = table.column("length")
    if column.null_count:
        raise InputError(f"{path}: {line(_first(pc.is_null(column)))}: field 'length' is empty")
    if pa.types.is_floating(column.type):  # CSV readers and pandas like floats; whole ones are fine
        floats = column.to_numpy()
        if np.all(floats == np.round(floats)):
            column = pa.chunked_array([pa.array(floats.astype(np.int64))])
    if not pa.types.is_integer(column.type):
        i, value = _first_non_integer(column)
        raise InputError(f"{path}: {line(i)}: field 'length' must be a positive integer, got {value!r}")
    values = column.to_numpy().astype(np.int64, copy=False)
    bad = np.flatnonzero(values <= 0)
    if bad.size:
        raise InputError(f"{path}: {line(int(bad[0]))}: field 'length' must be > 0, got {values[bad[0]]}")
    codes, sources = _source_codes(table, path, line)
    return Lengths(length=values, source_code=codes, sources=sources, origin=origin)


def _first(mask: pa.ChunkedArray) -> int:
    return int(np.flatnonzero(mask.to_numpy(zero_copy_only=False))[0])


def _first_non_integer(column: pa.ChunkedArray) -> tuple[int, Any]:
    """The first value that is not an integer (a CSV column with one word in it arrives as text)."""
    for i, value in enumerate(column.to_pylist()):
        if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
            continue
        if not isinstance(value, int) and not (isinstance(value, float) and value.is_integer()):
            return i, value
    return 0, str(column.type)


def _source_codes(table: pa.Table, path: Path, line) -> tuple[np.ndarray, tuple[str, ...]]:
    if "source" not in table.column_names:
        return np.zeros(table.num_rows, dtype=np.int32), (DEFAULT_SOURCE,)
    column = table.column("source")
    if column.null_count:
        column = pc.fill_null(column.cast(pa.string()), DEFAULT_SOURCE)
    if not pa.types.is_dictionary(column.type):
        column = pc.dictionary_encode(column.cast(pa.string()))
    column = column.unify_dictionaries() if isinstance(column, pa.ChunkedArray) else column
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    names = chunks[0].dictionary.to_pylist() if chunks else []
    codes = np.concatenate([c.indices.to_numpy(zero_copy_only=False) for c in chunks]).astype(np.int32)
    return codes, tuple(str(n) for n in names)


def _write_atomic(path: Path, lengths: Lengths) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    source = pa.DictionaryArray.from_arrays(pa.array(lengths.source_code, pa.int32()),
                                            pa.array(list(lengths.sources), pa.string()))
    table = pa.table({"length": pa.array(lengths.length, pa.int64()), "source": source})
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk must not leave a half-written file behind
        raise


def cache_path(corpus: Path, checkpoint: Path, cache_dir: Path) -> Path:
    """Where load() keeps this corpus's lengths for this tokenizer."""
    return _cache_file(cache_dir, corpus_sha256(corpus, cache_dir), checkpoint)


def _cache_file(cache_dir: Path, corpus_digest: str, checkpoint: Path) -> Path:
    return cache_dir / f"{corpus_digest[:20]}-{tokenizer_sha256(checkpoint)[:20]}.parquet"


def corpus_sha256(path: Path, cache_dir: Path) -> str:
    """The corpus's content hash, remembered per (path, size, mtime, inode) as git's index does,
    so that an unchanged multi-GB corpus is not re-read to find its cache entry."""
    try:
        known = _hash_memo(path, cache_dir).read_text().strip()
        if len(known) == 64:
            return known
    except OSError:
        pass
    return file_sha256(path)


def _hash_memo(path: Path, cache_dir: Path) -> Path:
    st = path.stat()
    stamp = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}|{st.st_dev}"
    return cache_dir / "hashes" / hashlib.sha256(stamp.encode()).hexdigest()[:32]


def remember_corpus_sha256(path: Path, cache_dir: Path, digest: str) -> None:
    """Written only once the corpus has been read whole and cached: never for a bad corpus."""
    memo = _hash_memo(path, cache_dir)
    memo.parent.mkdir(parents=True, exist_ok=True)
    tmp = memo.with_name(f".{memo.name}.{os.getpid()}.tmp")
    tmp.write_text(digest)
    os.replace(tmp, memo)


def file_sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def tokenizer_sha256(checkpoint: Path) -> str:
    """Hash of every file that decides tokenization (names and bytes), plus the cache format."""
    digest = hashlib.sha256(_CACHE_VERSION)
    files = [checkpoint] if checkpoint.is_file() else [
        checkpoint / n for n in _TOKENIZER_FILES if (checkpoint / n).is_file()]
    if not files:
        raise InputError(f"{checkpoint}: no tokenizer files (tokenizer.json) in this directory")
    for file in files:
        digest.update(file.name.encode() + b"\0" + file_sha256(file).encode())
    return digest.hexdigest()


# ---- reading a corpus -------------------------------------------------------------------------


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
    records = _read_parquet_corpus(path) if _is_parquet(path) else _read_jsonl_corpus(path)
    if not records.items:
        raise InputError(f"{path}: empty corpus (no records)")
    return records


def _read_jsonl_corpus(path: Path) -> Records:
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise InputError(f"{path}: line {line}: not UTF-8 (byte 0x{data[exc.start]:02x} at offset "
                         f"{exc.start})") from None
    records = Records(path=path, items=[], sources=[], numbers=[], lines=[])
    # split on "\n" only: str.splitlines() also splits on U+2028 and friends, which JSON strings may hold
    for line_no, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        number = len(records.items) + 1
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}: record {number} (line {line_no}): malformed JSON: {exc.msg} "
                             f"(column {exc.colno})") from None
        records.lines.append(line_no)
        records.numbers.append(number)
        _add_record(records, record)
    return records


def _read_parquet_corpus(path: Path) -> Records:
    try:
        table = _read_parquet(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: unreadable Parquet corpus: {str(exc).splitlines()[0]}") from None
    if not {"messages", "text"} & set(table.column_names):
        raise InputError(f"{path}: neither field 'messages' nor 'text' is present "
                         f"(columns: {', '.join(table.column_names)})")
    columns = {n: table.column(n).to_pylist() for n in ("messages", "text", "source")
               if n in table.column_names}
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


# ---- tokenizing -------------------------------------------------------------------------------


def load_tokenizer(checkpoint: Path):
    """(backend `tokenizers.Tokenizer`, HF tokenizer or None): a bare tokenizer.json has no template."""
    from tokenizers import Tokenizer

    if checkpoint.is_file():
        return _tokenizer_file(Tokenizer, checkpoint), None
    if not checkpoint.is_dir():
        raise InputError(f"{checkpoint}: no such checkpoint directory")
    if not (checkpoint / "tokenizer_config.json").is_file():
        if not (checkpoint / "tokenizer.json").is_file():
            raise InputError(f"{checkpoint}: no tokenizer (tokenizer.json) in this directory")
        return _tokenizer_file(Tokenizer, checkpoint / "tokenizer.json"), None
    from transformers import AutoTokenizer

    try:
        hf = AutoTokenizer.from_pretrained(checkpoint, local_files_only=True)
    except (OSError, ValueError, KeyError) as exc:
        raise InputError(f"{checkpoint}: cannot load tokenizer: {str(exc).splitlines()[0]}") from None
    if not getattr(hf, "is_fast", False):
        raise InputError(f"{checkpoint}: tokenizer is not a fast tokenizer (tokenizer.json needed)")
    return hf.backend_tokenizer, hf


def _tokenizer_file(cls, path: Path):
    try:
        return cls.from_file(str(path))
    except Exception as exc:  # tokenizers raises a bare Exception on malformed files
        raise InputError(f"{path}: cannot load tokenizer: {str(exc).splitlines()[0]}") from None


def tokenize_corpus(corpus: Path, checkpoint: Path) -> Lengths:
    records = read_corpus(corpus)
    backend, hf = load_tokenizer(checkpoint)
    lengths = np.empty(len(records.items), dtype=np.int64)
    is_chat = np.fromiter((isinstance(x, list) for x in records.items), bool, len(records.items))
    for want_chat in (False, True):
        index = np.flatnonzero(is_chat == want_chat)
        for start in range(0, index.size, _CHUNK):
            chunk = index[start:start + _CHUNK]
            items = [records.items[i] for i in chunk]
            if want_chat:
                texts = _render_chats(items, chunk, records, hf)
                # apply_chat_template(tokenize=True) adds no special tokens: the template has them
                encodings = backend.encode_batch_fast(texts, add_special_tokens=False)
            else:
                encodings = backend.encode_batch_fast(items, add_special_tokens=True)
            lengths[chunk] = [len(e) for e in encodings]
    empty = np.flatnonzero(lengths == 0)
    if empty.size:  # a zero-length sample has nothing to train on and breaks every ratio after
        i = int(empty[0])
        raise InputError(f"{records.where(i)}: field '{'messages' if is_chat[i] else 'text'}' gives "
                         "0 tokens")
    codes, sources = _factorize(records.sources)
    return Lengths(length=lengths, source_code=codes, sources=sources, origin="tokenized")


def _render_chats(conversations: list, index: np.ndarray, records: Records, hf) -> list[str]:
    if hf is None or not getattr(hf, "chat_template", None):
        raise InputError(f"{records.where(int(index[0]))}: field 'messages' needs a chat template, "
                         f"and the tokenizer has none (tokenizer_config.json chat_template)")
    try:
        return hf.apply_chat_template(conversations, tokenize=False)
    except Exception:  # find the record the template rejects, and name it
        for i, conversation in zip(index, conversations):
            try:
                hf.apply_chat_template(conversation, tokenize=False)
            except Exception as exc:
                raise InputError(f"{records.where(int(i))}: field 'messages': chat template failed: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
        raise


def _factorize(values: Iterable[str]) -> tuple[np.ndarray, tuple[str, ...]]:
    table: dict[str, int] = {}
    codes = np.fromiter((table.setdefault(v, len(table)) for v in values), np.int32)
    return codes, tuple(table)


def vocab_size(checkpoint: Path | None) -> int | None:
    """The model's vocabulary (config.json, a multimodal config's text_config), else the tokenizer's."""
    if checkpoint is None:
        return None
    config = checkpoint / "config.json" if checkpoint.is_dir() else None
    if config is not None and config.is_file():
        config, raw = read_config(config)
        size = raw.get("vocab_size") or (raw.get("text_config") or {}).get("vocab_size")
        if size is not None:
            if not isinstance(size, int) or size <= 0:
                raise InputError(f"{config}: field 'vocab_size' must be a positive integer, got {size!r}")
            return size
    from tokenizers import Tokenizer  # not AutoTokenizer: importing transformers costs seconds

    file = checkpoint if checkpoint.is_file() else checkpoint / "tokenizer.json"
    if not file.is_file():
        raise InputError(f"{checkpoint}: no config.json vocab_size and no tokenizer.json: give --vocab-size")
    return int(_tokenizer_file(Tokenizer, file).get_vocab_size(with_added_tokens=True))
