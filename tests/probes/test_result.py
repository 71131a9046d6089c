"""The probe contract's validation pieces: FieldError worded per edge, make_config, shown()."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from probes.mask import probe as mask
from probes.profile import probe as profile
from probes.result import SHOWN_CHARS, FieldError, InputError, field_docs, make_config, shown


def test_a_field_error_is_worded_by_each_edge():
    err = FieldError("max_steps", "`max_steps` 3 < `steps` 9")
    assert err.line(lambda n: "--" + n.replace("_", "-")) == "--max-steps 3 < --steps 9"
    assert err.text(lambda n: f"config.{n}") == "config.max_steps 3 < config.steps 9"
    assert str(err) == "max_steps 3 < steps 9"
    predicate = FieldError("lora_rank", "must be >= 1, got 0")  # not naming itself: put after the name
    assert predicate.line(lambda n: "--" + n.replace("_", "-")) == "--lora-rank must be >= 1, got 0"
    again = pickle.loads(pickle.dumps(predicate))  # a Ray task's exception crosses processes pickled
    assert (again.field, again.message) == ("lora_rank", "must be >= 1, got 0")


def test_make_config_checks_names_types_then_the_configs_own_checks(tmp_path):
    config = make_config(mask.Config, {"checkpoint": str(tmp_path), "seq_len": "64", "padding": "packed"})
    assert config.seq_len == 64 and config.checkpoint == tmp_path
    with pytest.raises(FieldError) as info:
        make_config(mask.Config, {"checkpoint": "x", "seqlen": 64})
    assert info.value.field == "seqlen" and "is not a field of probe 'mask'" in info.value.message
    with pytest.raises(FieldError, match="is not a field of probe 'profile'"):  # its Config in profile_config.py
        make_config(profile.Config, {"checkpoint": "x", "seqlen": 64})
    with pytest.raises(FieldError) as info:
        make_config(mask.Config, {"checkpoint": "x", "seq_len": "x" * 10_000})
    assert info.value.field == "seq_len" and len(str(info.value)) < 200
    with pytest.raises(FieldError) as info:
        make_config(mask.Config, {"seq_len": 64})
    assert (info.value.field, info.value.message) == ("checkpoint", "is required")
    with pytest.raises(FieldError) as info:  # raised by Config.__post_init__, unwrapped from pydantic's error
        make_config(mask.Config, {"checkpoint": "x", "seq_len": 1})
    assert (info.value.field, info.value.message) == ("seq_len", "must be >= 2, got 1")
    assert isinstance(info.value, InputError)


@pytest.mark.parametrize(
    "value",
    ["y" * 10_000_000, [[["z" * 1000] * 1000] * 1000], {str(i): i for i in range(10**5)}, 10**5000],
    ids=["string", "nested", "dict", "int"],
)
def test_shown_is_short_whatever_the_value(value):
    assert len(shown(value)) <= SHOWN_CHARS


def test_field_docs_read_a_base_class_and_let_a_redeclared_field_say_more():
    from probes.carrier import probe as carrier
    from probes.corpus.config import CorpusConfig
    from probes.padding import probe as padding

    base, docs = field_docs(CorpusConfig), field_docs(padding.Config)
    assert set(base) <= set(docs) and {f.name for f in dataclasses.fields(padding.Config)} == set(docs)
    assert docs["corpus"] == base["corpus"]  # inherited as written
    assert docs["checkpoint"] != base["checkpoint"] and "vocabulary size" in docs["checkpoint"]  # redeclared
    assert "repeat --checkpoint" in field_docs(carrier.Config)["checkpoint"]
    assert field_docs(carrier.Config)["lora_rank"] == "LoRA rank on every target module the harness discovers."


def test_a_json_file_that_never_ends_or_never_comes_is_one_line_not_a_hang(tmp_path):
    """A FIFO nobody writes blocked the open for ever (a sweep's goodput job hung all night); /dev/zero was
    read until memory ran out; a folder named its fd. Each is now one InputError naming the file."""
    import os
    import threading

    from probes.result import read_json_file

    fifo = tmp_path / "profile.json"
    os.mkfifo(fifo)
    found: list[str] = []

    def read() -> None:
        try:
            read_json_file(fifo, "profile JSON")
        except InputError as exc:
            found.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert not reader.is_alive() and found == [f"{fifo}: unreadable profile JSON: the file is empty"]
    with pytest.raises(InputError, match="larger than 64 MiB"):
        read_json_file(Path("/dev/zero"), "profile JSON")
    with pytest.raises(InputError, match="unreadable profile JSON: Is a directory$"):
        read_json_file(tmp_path, "profile JSON")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000)  # json raises RecursionError here, which is no ValueError
    with pytest.raises(InputError, match=f"^{deep}: unreadable profile JSON: nested too deeply"):
        read_json_file(deep, "profile JSON")
    written = tmp_path / "ok.json"
    written.write_text('{"a": 1}')
    assert read_json_file(written, "profile JSON") == {"a": 1}
