"""Corpus -> token lengths, shared by the `padding` and `bucket` probes.

A corpus is JSONL or Parquet; each record holds `messages` (chat turns, rendered with the
tokenizer's own chat template, as training renders them) or `text`, and optionally `source`; the
file is read and checked by probes.corpus.records. Tokenization uses the checkpoint's own fast
tokenizer from a local directory, batched. Lengths are cached as Parquet under
`<cache_dir>/<corpus sha256>-<tokenizer sha256>.parquet`, so a second run over the same bytes with
the same tokenizer reads the cache and never parses or tokenizes. A lengths file (Parquet or CSV
with `length` and optional `source`) skips tokenization entirely.

Every user error raises InputError naming the file, the record (1-based) and the field.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from probes.corpus.records import DEFAULT_SOURCE, Records, is_parquet, read_corpus, read_parquet
from probes.result import InputError, require
from probes.step.train.checkpoint import read_config

DEFAULT_CACHE_DIR = Path("~/.cache/labprobe/lengths")
_CACHE_VERSION = b"labprobe-lengths-v1"
MAX_LENGTH = 2**31 - 1
"""Tokens a sample may have at most: far above any context, and squares of it still fit an int64."""
_CHUNK = 8192  # records per tokenizer batch: bounded memory, still batched
# Files that decide how text becomes tokens (and so belong in the tokenizer's hash).
_TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "chat_template.jinja",
    "chat_template.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


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
    require((corpus is None) != (lengths is None), "corpus", "give exactly one of `corpus` and `lengths`")
    require(
        corpus is None or checkpoint is not None, "corpus", "needs `checkpoint` (the directory holding the tokenizer)"
    )


def load(*, corpus: Path | None, lengths: Path | None, checkpoint: Path | None, cache_dir: Path | None) -> Lengths:
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
            result = _from_table(read_parquet(cache, read_dictionary=["source"]), cache, "cache")
            _remember_or_warn(corpus, cache_dir, digest)
            return result
    except (pa.ArrowInvalid, OSError, InputError):
        pass  # a damaged or unreadable cache entry is rebuilt below, never trusted
    result = tokenize_corpus(corpus, checkpoint)  # raises on bad input before anything is cached
    try:
        _write_atomic(cache, result)
    except OSError as exc:
        # the cache only saves time: a read-only or bad --cache-dir must not lose the run
        _warn(f"cannot write the lengths cache under {cache_dir} ({exc.strerror or exc}); continuing without it")
        return result
    _remember_or_warn(corpus, cache_dir, digest)
    return result


def _warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)


def _remember_or_warn(corpus: Path, cache_dir: Path, digest: str) -> None:
    try:
        remember_corpus_sha256(corpus, cache_dir, digest)
    except OSError as exc:
        _warn(
            f"cannot remember the corpus hash under {cache_dir} ({exc.strerror or exc}); "
            "the next run re-reads the corpus"
        )


# ---- lengths files and the cache -------------------------------------------------------------


def read_lengths_file(path: Path) -> Lengths:
    if not path.is_file():
        raise InputError(f"{path}: no such lengths file")
    try:
        if is_parquet(path):
            table = read_parquet(path)
        else:
            from pyarrow import csv

            # Only an empty cell is empty: Arrow's default also reads "nan" and "NA" as missing.
            convert = csv.ConvertOptions(column_types={"source": pa.string()}, null_values=[""])
            table = csv.read_csv(path, convert_options=convert)
    except (pa.ArrowInvalid, OSError) as exc:
        raise InputError(f"{path}: unreadable lengths file: {str(exc).splitlines()[0]}") from None
    return _from_table(table, path, "lengths file")


def _from_table(table: pa.Table, path: Path, origin: str) -> Lengths:
    """Validate a (length[, source]) table; records are numbered from 1 (CSV line = record + 1)."""
    line = (
        (lambda i: f"record {i + 1} (line {i + 2})") if path.suffix.lower() == ".csv" else (lambda i: f"record {i + 1}")
    )
    if table.num_rows == 0:
        raise InputError(f"{path}: empty lengths file (no records)")
    if "length" not in table.column_names:
        raise InputError(f"{path}: field 'length' is missing (columns: {', '.join(table.column_names)})")
    column = table.column("length")
    if column.null_count:
        raise InputError(f"{path}: {line(_first(pc.is_null(column)))}: field 'length' is empty")
    if pa.types.is_floating(column.type):  # CSV readers and pandas like floats; whole ones are fine
        floats = column.to_numpy()
        whole = np.isfinite(floats) & (floats == np.floor(floats))  # nan, inf and 3.5 are not
        if not whole.all():
            i = int(np.flatnonzero(~whole)[0])
            raise InputError(f"{path}: {line(i)}: field 'length' must be a positive integer, got {float(floats[i])}")
        too_big = np.flatnonzero(np.abs(floats) > MAX_LENGTH)  # compared as floats: 1e30 never reaches int64
        if too_big.size:
            i = int(too_big[0])
            raise InputError(f"{path}: {line(i)}: field 'length' must be at most {MAX_LENGTH}, got {floats[i]:g}")
        column = pa.chunked_array([pa.array(floats.astype(np.int64))])
    if not pa.types.is_integer(column.type):
        i, value = _first_non_integer(column)
        raise InputError(f"{path}: {line(i)}: field 'length' must be a positive integer, got {value!r}")
    too_big = pc.greater(
        column, pa.scalar(MAX_LENGTH, pa.uint64() if pa.types.is_unsigned_integer(column.type) else pa.int64())
    )
    if pc.any(too_big).as_py():  # before the cast: a uint64 above 2**63 would wrap to a negative int64
        i = _first(too_big)
        raise InputError(f"{path}: {line(i)}: field 'length' must be at most {MAX_LENGTH}, got {column[i].as_py()}")
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
        digits = value.strip().lstrip("+-") if isinstance(value, str) else ""
        if digits.isascii() and digits.isdigit():  # str.isdigit alone takes '٣' and '²', which no reader does
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
    source = pa.DictionaryArray.from_arrays(
        pa.array(lengths.source_code, pa.int32()), pa.array(list(lengths.sources), pa.string())
    )
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
    files = (
        [checkpoint]
        if checkpoint.is_file()
        else [checkpoint / n for n in _TOKENIZER_FILES if (checkpoint / n).is_file()]
    )
    if not files:
        raise InputError(f"{checkpoint}: no tokenizer files (tokenizer.json) in this directory")
    for file in files:
        digest.update(file.name.encode() + b"\0" + file_sha256(file).encode())
    return digest.hexdigest()


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
            chunk = index[start : start + _CHUNK]
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
        raise InputError(f"{records.where(i)}: field '{'messages' if is_chat[i] else 'text'}' gives 0 tokens")
    codes, sources = _factorize(records.sources)
    return Lengths(length=lengths, source_code=codes, sources=sources, origin="tokenized")


def _render_chats(conversations: list, index: np.ndarray, records: Records, hf) -> list[str]:
    if hf is None or not getattr(hf, "chat_template", None):
        raise InputError(
            f"{records.where(int(index[0]))}: field 'messages' needs a chat template, "
            f"and the tokenizer has none (tokenizer_config.json chat_template)"
        )
    try:
        return hf.apply_chat_template(conversations, tokenize=False)
    except Exception:  # find the record the template rejects, and name it
        for i, conversation in zip(index, conversations):
            try:
                hf.apply_chat_template(conversation, tokenize=False)
            except Exception as exc:
                raise InputError(
                    f"{records.where(int(i))}: field 'messages': chat template failed: "
                    f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
                ) from None
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


def hidden_size(checkpoint: Path | None) -> int | None:
    """The model's hidden size from config.json (a multimodal config's text_config); None without one."""
    config = checkpoint / "config.json" if checkpoint is not None and checkpoint.is_dir() else None
    if config is None or not config.is_file():
        return None
    config, raw = read_config(config)
    size = raw.get("hidden_size") or (raw.get("text_config") or {}).get("hidden_size")
    if size is not None and (not isinstance(size, int) or size <= 0):
        raise InputError(f"{config}: field 'hidden_size' must be a positive integer, got {size!r}")
    return size
