"""corpus_records: a JSONL or Parquet corpus read into records (texts and conversations, each with
its source, record number and JSONL line), and every corpus the reader rejects, through the CLI
(one line naming file, record and field; exit 2; nothing cached)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from probes.corpus import records as corpus_records
from probes.result import InputError
from runner.cli import main

CHAT = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."}]
RECORDS = [
    {"text": "plain", "source": "web"},
    {"messages": CHAT},  # no source: the default one
    {"text": "a line\u2028separator and\u0085next line inside one record", "source": "code"},
]


def test_jsonl_records_keep_their_number_line_and_source(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = ["", json.dumps(RECORDS[0]), "   ", json.dumps(RECORDS[1]), json.dumps(RECORDS[2], ensure_ascii=False)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = corpus_records.read_corpus(path)
    assert records.items == ["plain", CHAT, RECORDS[2]["text"]]  # U+2028 and U+0085 split nothing
    assert records.sources == ["web", corpus_records.DEFAULT_SOURCE, "code"]
    assert records.numbers == [1, 2, 3] and records.lines == [2, 4, 5]  # blank lines are no records
    assert records.where(1) == f"{path}: record 2 (line 4)"


def test_parquet_gives_the_same_records_without_lines(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({k: [r.get(k) for r in RECORDS] for k in ("text", "messages", "source")}), path)
    records = corpus_records.read_corpus(path)
    assert records.items == ["plain", CHAT, RECORDS[2]["text"]]
    assert records.sources == ["web", corpus_records.DEFAULT_SOURCE, "code"]
    assert records.numbers == [1, 2, 3] and records.lines is None
    assert records.where(1) == f"{path}: record 2"


def test_a_parquet_corpus_without_text_or_messages_names_its_columns(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"body": ["x"]}), path)
    with pytest.raises(InputError, match=r"c.parquet: neither field 'messages' nor 'text'.*columns: body"):
        corpus_records.read_corpus(path)


# ---- bad input through the CLI: exit 2, one line, naming file, record and field --------------


def _bad_corpus(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"text": "fine"})
    content = {
        "empty": b"\n  \n",
        "neither": f"{good}\n{good}\n{json.dumps({'source': 'x', 'content': 'no'})}\n".encode(),
        "non_utf8": f"{good}\n".encode() + b'{"text": "caf\xe9"}\n',
        "malformed": f'{good}\n{{"text": "unterminated\n'.encode(),
        "text_type": f"{good}\n{json.dumps({'text': 42})}\n".encode(),
        "turn": f"{json.dumps({'messages': [{'role': 'user', 'content': None}]})}\n".encode(),
        "not_object": b"[1, 2]\n",
        "deep": f"{good}\n".encode() + b"[" * 100_000 + b"\n",  # json raises RecursionError, no ValueError
    }[kind]
    path.write_bytes(content)
    return path


@pytest.mark.parametrize(
    ("kind", "needles"),
    [
        ("empty", ["bad.jsonl", "empty corpus"]),
        ("neither", ["bad.jsonl", "record 3 (line 3)", "neither 'messages' nor 'text'"]),
        ("non_utf8", ["bad.jsonl", "line 2", "not UTF-8", "0xe9"]),
        ("malformed", ["bad.jsonl", "record 2 (line 2)", "malformed JSON"]),
        ("text_type", ["bad.jsonl", "record 2", "field 'text'"]),
        ("turn", ["bad.jsonl", "record 1", "field 'messages[0].content'"]),
        ("not_object", ["bad.jsonl", "record 1", "not a JSON object"]),
        ("deep", ["bad.jsonl", "record 2 (line 2)", "malformed JSON: nested too deeply"]),
    ],
)
@pytest.mark.parametrize("probe", ["padding", "bucket"])
def test_bad_corpus_is_one_line_exit_2(tmp_path, tokenizer_dir, capsys, kind, needles, probe):
    path = _bad_corpus(tmp_path, kind)
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
    for needle in needles:
        assert needle in err
    assert not list((tmp_path / "cache").glob("*")) if (tmp_path / "cache").exists() else True
