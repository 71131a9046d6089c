"""corpus: lengths from the real demo tokenizer (a BPE trained locally with `tokenizers`), checked
against the HF tokenizer called one record at a time; the content-keyed cache; lengths files; and
every bad input through the CLI (one line naming file, record and field; exit 2)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import warnings
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from transformers import AutoTokenizer

from probes.corpus import lengths as corpus
from probes.result import InputError
from runner.cli import main

RECORDS = [
    {"text": "Hello world, a short text.", "source": "web"},
    {
        "messages": [
            {"role": "user", "content": "What is two plus two?"},
            {"role": "assistant", "content": "Four, of course."},
        ],
        "source": "chat",
    },
    {"text": "def f(x):\n    return x * 2\n" * 5, "source": "code"},
    {"messages": [{"role": "user", "content": "Hi"}]},  # no source -> "default"
    {"text": "Bonjour à tous, ünïcödé text 🙂.", "source": "web"},
    {"text": "a line\u2028separator and\u0085next line stay inside one record", "source": "web"},
]


@pytest.fixture(scope="module")
def hf(tokenizer_dir):
    return AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)


def write_jsonl(path: Path, records, blank_lines: bool = False) -> Path:
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    if blank_lines:
        lines.insert(1, "")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def expected_lengths(hf, records) -> list[int]:
    """What training sees: tokenizer(text), or the chat template tokenized, one record at a time."""
    out = []
    for r in records:
        if "messages" in r:
            out.append(len(hf.apply_chat_template(r["messages"], tokenize=True)["input_ids"]))
        else:
            out.append(len(hf(r["text"])["input_ids"]))
    return out


def test_lengths_match_the_tokenizer_record_by_record(tmp_path, tokenizer_dir, hf):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS, blank_lines=True)
    data = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=None)
    assert data.length.tolist() == expected_lengths(hf, RECORDS)
    names = [data.sources[c] for c in data.source_code]
    assert names == ["web", "chat", "code", "default", "web", "web"]
    assert data.origin == "tokenized"


def test_parquet_corpus_gives_the_same_lengths(tmp_path, tokenizer_dir, hf):
    path = tmp_path / "c.parquet"
    columns = {k: [r.get(k) for r in RECORDS] for k in ("text", "messages", "source")}
    pq.write_table(pa.table(columns), path)
    data = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=None)
    assert data.length.tolist() == expected_lengths(hf, RECORDS)


def test_chunks_larger_than_one_batch(tmp_path, tokenizer_dir, hf, monkeypatch):
    monkeypatch.setattr(corpus, "_CHUNK", 2)  # several batches, interleaved text and chats
    records = RECORDS * 3
    path = write_jsonl(tmp_path / "c.jsonl", records)
    data = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=None)
    assert data.length.tolist() == expected_lengths(hf, records)


def test_second_run_reads_the_cache_and_never_tokenizes(tmp_path, tokenizer_dir, monkeypatch):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    cache = tmp_path / "cache"
    first = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=cache)
    assert first.origin == "tokenized" and len(list(cache.glob("*.parquet"))) == 1

    def no_tokenizing(*_):
        raise AssertionError("tokenized again")

    monkeypatch.setattr(corpus, "tokenize_corpus", no_tokenizing)
    second = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=cache)
    assert second.origin == "cache"
    assert second.length.tolist() == first.length.tolist()
    assert [second.sources[c] for c in second.source_code] == [first.sources[c] for c in first.source_code]


def test_cache_key_follows_corpus_and_tokenizer_content(tmp_path, tokenizer_dir):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    key = corpus.cache_path(path, tokenizer_dir, tmp_path)
    write_jsonl(tmp_path / "c.jsonl", RECORDS[:-1])
    assert corpus.cache_path(path, tokenizer_dir, tmp_path) != key  # same name, new bytes
    other = tmp_path / "other_tok"
    shutil.copytree(tokenizer_dir, other)
    config = json.loads((other / "tokenizer_config.json").read_text())
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (other / "tokenizer_config.json").write_text(json.dumps(config))
    assert corpus.cache_path(path, other, tmp_path) != corpus.cache_path(path, tokenizer_dir, tmp_path)


def test_content_hash_is_remembered_until_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "aaaa"}\n')
    first = corpus.corpus_sha256(path, tmp_path)
    assert first == hashlib.sha256(path.read_bytes()).hexdigest()
    corpus.remember_corpus_sha256(path, tmp_path, first)
    real = corpus.file_sha256
    monkeypatch.setattr(corpus, "file_sha256", lambda p: pytest.fail("hashed an unchanged file again"))
    assert corpus.corpus_sha256(path, tmp_path) == first
    path.write_text('{"text": "bbbb"}\n')  # same size, new bytes, new mtime
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1))
    monkeypatch.setattr(corpus, "file_sha256", real)
    assert corpus.corpus_sha256(path, tmp_path) == hashlib.sha256(path.read_bytes()).hexdigest() != first


def test_damaged_cache_entry_is_rebuilt(tmp_path, tokenizer_dir):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    cache = tmp_path / "cache"
    corpus.cache_path(path, tokenizer_dir, cache).parent.mkdir(parents=True, exist_ok=True)
    corpus.cache_path(path, tokenizer_dir, cache).write_bytes(b"PAR1 not parquet")
    data = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir, cache_dir=cache)
    assert data.origin == "tokenized" and data.num_samples == len(RECORDS)


def test_bare_tokenizer_json_tokenizes_text(tmp_path, tokenizer_dir, hf):
    texts = [r for r in RECORDS if "text" in r]
    path = write_jsonl(tmp_path / "c.jsonl", texts)
    data = corpus.load(corpus=path, lengths=None, checkpoint=tokenizer_dir / "tokenizer.json", cache_dir=None)
    assert data.length.tolist() == expected_lengths(hf, texts)


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_lengths_file(tmp_path, fmt):
    lengths, sources = [5, 1, 300, 7], ["a", "b", "a", "c"]
    path = tmp_path / f"l.{fmt}"
    if fmt == "csv":
        path.write_text("length,source\n" + "".join(f"{n},{s}\n" for n, s in zip(lengths, sources)))
    else:
        pq.write_table(pa.table({"length": lengths, "source": sources}), path)
    data = corpus.read_lengths_file(path)
    assert data.length.tolist() == lengths
    assert [data.sources[c] for c in data.source_code] == sources
    assert data.origin == "lengths file"


def test_lengths_file_without_source(tmp_path):
    path = tmp_path / "l.csv"
    path.write_text("length\n3\n4\n")
    data = corpus.read_lengths_file(path)
    assert data.length.tolist() == [3, 4] and data.sources == (corpus.DEFAULT_SOURCE,)


def test_vocab_size_from_config_text_config_and_tokenizer(tmp_path, tokenizer_dir):
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "config.json").write_text(json.dumps({"vocab_size": 151936}))
    (tmp_path / "mm").mkdir()
    (tmp_path / "mm" / "config.json").write_text(json.dumps({"text_config": {"vocab_size": 262208}}))
    assert corpus.vocab_size(tmp_path / "flat") == 151936
    assert corpus.vocab_size(tmp_path / "mm") == 262208
    raw = json.loads((tokenizer_dir / "tokenizer.json").read_text())
    assert corpus.vocab_size(tokenizer_dir) == len(raw["model"]["vocab"])  # specials are in the vocab


def test_validate_inputs():
    with pytest.raises(InputError, match="exactly one of corpus and lengths"):
        corpus.validate_inputs(corpus=None, lengths=None, checkpoint=None)
    with pytest.raises(InputError, match="corpus needs checkpoint"):
        corpus.validate_inputs(corpus=Path("c.jsonl"), lengths=None, checkpoint=None)


# ---- bad input through the CLI: exit 2, one line, naming file, record and field --------------
# A corpus the reader rejects (malformed JSON, a missing field...) is tested in test_corpus_records.py;
# here what only tokenizing finds.


@pytest.mark.parametrize("probe", ["padding", "bucket"])
def test_a_zero_token_record_is_one_line_exit_2(tmp_path, tokenizer_dir, capsys, probe):
    path = tmp_path / "bad.jsonl"
    path.write_text(f"{json.dumps({'text': 'fine'})}\n{json.dumps({'text': ''})}\n")
    code = main(
        [
            "probe",
            probe,
            "--checkpoint",
            str(tokenizer_dir),
            "--corpus",
            str(path),
            "--cache-dir",
            str(tmp_path / "cache"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for needle in ["bad.jsonl", "record 2 (line 2)", "field 'text'", "0 tokens"]:
        assert needle in err
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").glob("*"))


def test_empty_text_really_gives_zero_tokens(hf):
    """What makes the zero-token record above a zero: the demo tokenizer adds no BOS to text."""
    assert hf("")["input_ids"] == []


@pytest.mark.parametrize("probe", ["padding", "bucket"])
def test_unwritable_cache_dir_warns_once_and_runs_on(tmp_path, tokenizer_dir, hf, capsys, probe):
    path = write_jsonl(tmp_path / "c.jsonl", RECORDS)
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache directory's parent should be")
    cache = blocker / "cache"
    code = main(
        [
            "probe",
            probe,
            "--checkpoint",
            str(tokenizer_dir),
            "--corpus",
            str(path),
            "--cache-dir",
            str(cache),
            "--batch-size",
            "2",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and str(cache) in err[0], err
    assert "Traceback" not in captured.err and blocker.read_text().startswith("a file")
    out = json.loads(captured.out)
    if probe == "padding":  # the lengths reached the probe: its total is the tokenizer's
        total = next(r for r in out["tables"]["lengths"] if r["source"] == "all")["total_tokens"]
        assert total == sum(expected_lengths(hf, RECORDS))


def _bad_lengths(tmp_path: Path, kind: str) -> Path:
    if kind in ("zero_csv", "text_csv", "empty_cell_csv", "no_column_csv", "header_only_csv"):
        path = tmp_path / "bad.csv"
        path.write_text(
            {
                "zero_csv": "length,source\n4,a\n0,b\n",
                "text_csv": "length\n4\nfour\n",
                "empty_cell_csv": "length,source\n4,a\n,b\n",
                "no_column_csv": "tokens\n4\n",
                "header_only_csv": "length,source\n",
            }[kind]
        )
        return path
    path = tmp_path / "bad.parquet"
    pq.write_table(pa.table({"length": [3, 9, -2]}), path)
    return path


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        ("zero_csv", ["bad.csv", "record 2 (line 3)", "field 'length'", "> 0"]),
        ("negative_parquet", ["bad.parquet", "record 3", "field 'length'", "-2"]),
        ("text_csv", ["bad.csv", "record 2 (line 3)", "field 'length'"]),
        ("empty_cell_csv", ["bad.csv", "record 2 (line 3)", "field 'length'"]),
        ("no_column_csv", ["bad.csv", "field 'length' is missing"]),
        ("header_only_csv", ["bad.csv", "empty"]),
    ],
)
def test_bad_lengths_file_is_one_line_exit_2(tmp_path, capsys, kind, needles):
    path = _bad_lengths(tmp_path, kind)
    assert main(["probe", "padding", "--lengths", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    for needle in needles:
        assert needle in err, err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--lengths", "{tmp}/missing.csv"], "missing.csv: no such lengths file"),
        (["--corpus", "{tmp}/missing.jsonl", "--checkpoint", "{tok}"], "missing.jsonl: no such corpus file"),
        (["--corpus", "{tmp}/c.jsonl"], "--corpus needs --checkpoint"),
        ([], "exactly one of --corpus and --lengths"),
        (["--corpus", "{tmp}/c.jsonl", "--checkpoint", "{tmp}/nosuch"], "nosuch"),
        (["--corpus", "{tmp}/chat.jsonl", "--checkpoint", "{tok}/tokenizer.json"], "needs a chat template"),
    ],
)
def test_missing_inputs_are_one_line_exit_2(tmp_path, tokenizer_dir, capsys, args, needle):
    write_jsonl(tmp_path / "c.jsonl", RECORDS[:1])
    write_jsonl(tmp_path / "chat.jsonl", RECORDS[1:2])
    argv = [a.format(tmp=tmp_path, tok=tokenizer_dir) for a in args]
    assert main(["probe", "padding", *argv, "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert needle in err, err


@pytest.mark.parametrize(
    ("cell", "needle"),
    [
        ("1e30", "must be at most 2147483647, got 1e+30"),  # a numpy overflow came through as a negative
        ("inf", "must be a positive integer, got inf"),
        ("nan", "must be a positive integer, got nan"),  # read as missing: "is empty"
        ("3.5", "must be a positive integer, got 3.5"),
        ("99999999999", "must be at most 2147483647, got 99999999999"),
    ],
)
def test_a_lengths_cell_that_is_no_token_count_names_its_record(tmp_path, cell, needle):
    path = tmp_path / "bad.csv"
    path.write_text(f"length,source\n4,a\n{cell},b\n5,c\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's "overflow encountered in cast" is a failure too
        with pytest.raises(InputError) as raised:
            corpus.read_lengths_file(path)
    assert str(raised.value) == f"{path}: record 2 (line 3): field 'length' {needle}"


def test_a_uint64_parquet_length_past_int64_is_refused_not_wrapped(tmp_path):
    path = tmp_path / "big.parquet"
    pq.write_table(pa.table({"length": pa.array([3, 2**64 - 1], pa.uint64())}), path)
    with pytest.raises(InputError, match=r"record 2: field 'length' must be at most 2147483647"):
        corpus.read_lengths_file(path)


@pytest.mark.parametrize("cell", ["\u0663", "\uff15", "1\u00b2"])
def test_a_lengths_cell_of_digits_that_are_not_ascii_names_its_own_record(tmp_path, cell):
    """An Arabic-Indic 3 (str.isdigit says yes) made the whole column text and the error named
    record 1 and "got 'string'" (the column's type), not the cell."""
    path = tmp_path / "bad.csv"
    path.write_text(f"length,source\n4,a\n{cell},b\n5,c\n", encoding="utf-8")
    with pytest.raises(InputError) as raised:
        corpus.read_lengths_file(path)
    assert str(raised.value) == f"{path}: record 2 (line 3): field 'length' must be a positive integer, got {cell!r}"
