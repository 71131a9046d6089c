"""mask probe: real transformers forwards of Qwen3- and Gemma-3-style configs, checked against
key counts recomputed here by brute force from the batch's own tokens and positions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import Gemma3Config, Gemma3TextConfig, Qwen3Config

from probes.mask import probe as mask
from probes.step.masking import attention_calls as mask_calls
from runner.cli import main

WINDOW = 8


def _small(cls, **kw):
    return cls(
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
        max_position_embeddings=4096,
        **kw,
    )


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("qwen3")
    _small(Qwen3Config, num_hidden_layers=3, use_cache=True).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory) -> Path:
    """The real multimodal layout: the decoder sits under text_config; every 3rd layer is full."""
    path = tmp_path_factory.mktemp("gemma3")
    types = ["full_attention" if (i + 1) % 3 == 0 else "sliding_attention" for i in range(6)]
    text = _small(
        Gemma3TextConfig, num_hidden_layers=6, sliding_window=WINDOW, layer_types=types, query_pre_attn_scalar=16
    )
    Gemma3Config(text_config=text.to_dict()).save_pretrained(path)
    return path


def brute_force_keys(lengths_per_row, seq_len, window=None, packed=None):
    """Expected keys per real query: min(window, position-in-own-sequence + 1), one loop per token."""
    expected = []
    for real_len in lengths_per_row:
        starts = [0]
        for n in packed or []:
            starts.append(starts[-1] + n)
        for q in range(real_len):
            start = max(s for s in starts[:-1] or [0] if s <= q) if packed else 0
            keys = q - start + 1
            expected.append(min(window, keys) if window else keys)
    return min(expected), max(expected)


def probe(checkpoint, **kw):
    return mask.run(mask.Config(checkpoint=checkpoint, **kw))


def test_qwen3_unpadded_keeps_fast_path_on_every_layer(qwen3):
    result = probe(qwen3, seq_len=40, batch_size=2)
    rows = result.tables["layers"]
    assert [r.layer for r in rows] == [0, 1, 2]
    assert all(r.mask == "none" and r.is_causal and r.fast_path and r.expected_backend == "flash" for r in rows)
    assert {(r.keys_min, r.keys_max) for r in rows} == {brute_force_keys([40, 40], 40)}
    assert result.ok


def test_qwen3_right_padding_gets_a_tensor_and_real_queries_see_only_real_keys(qwen3):
    result = probe(qwen3, seq_len=40, batch_size=2, padding="right")
    rows = result.tables["layers"]
    assert all(r.mask == "tensor" and not r.is_causal and not r.fast_path for r in rows)
    assert all(r.expected_backend == "efficient" for r in rows)
    # rows shrink from full length to half: 40 and 20 real tokens
    assert {(r.keys_min, r.keys_max) for r in rows} == {brute_force_keys([40, 20], 40)}
    assert all(r.band_ok and not r.cross_sequence for r in rows)


def test_packed_batch_leaks_across_sequences_when_use_cache_is_left_on(qwen3):
    result = probe(qwen3, seq_len=30, padding="packed", num_packed=3)  # config says use_cache=True
    rows = result.tables["layers"]
    assert result.summary["use_cache"] is True
    assert all(r.mask == "none" and r.cross_sequence for r in rows)
    assert rows[0].keys_max == 30  # the last token sees the whole row, all three sequences
    failed = {c.name for c in result.checks if not c.ok}
    assert failed == {"no_cross_sequence"}


def test_packed_batch_stays_apart_without_cache(qwen3):
    result = probe(qwen3, seq_len=30, padding="packed", num_packed=3, use_cache=False)
    rows = result.tables["layers"]
    positions = mask_calls.build_batch(mask.Config(checkpoint=qwen3, seq_len=30, padding="packed"), 512)
    pos = positions.kwargs["position_ids"][0].tolist()
    segments = [i for i, p in enumerate(pos) if p == 0] + [30]
    lengths = [b - a for a, b in zip(segments, segments[1:])]
    assert len(lengths) == 3 and sum(lengths) == 30
    assert all(r.mask == "tensor" and not r.cross_sequence for r in rows)
    assert {(r.keys_min, r.keys_max) for r in rows} == {brute_force_keys([30], 30, packed=lengths)}
    assert result.ok


def test_all_ones_mask_also_disables_packing_detection(qwen3):
    result = probe(qwen3, seq_len=30, padding="packed", use_cache=False, attention_mask=True)
    assert all(r.cross_sequence for r in result.tables["layers"])


def test_gemma3_sliding_band_is_the_window(gemma3):
    result = probe(gemma3, seq_len=32)
    rows = result.tables["layers"]
    sliding = [r for r in rows if r.layer_type == "sliding_attention"]
    full = [r for r in rows if r.layer_type == "full_attention"]
    assert [r.layer for r in full] == [2, 5]
    assert all(r.window == WINDOW and r.mask == "tensor" and not r.fast_path for r in sliding)
    assert {(r.keys_min, r.keys_max) for r in sliding} == {brute_force_keys([32], 32, window=WINDOW)}
    assert all(r.window is None and r.mask == "none" and r.fast_path for r in full)
    assert {(r.keys_min, r.keys_max) for r in full} == {(1, 32)}
    assert result.ok


def test_gemma3_right_padding_masks_every_layer_and_keeps_the_band(gemma3):
    """Rows of 32 and 16 real tokens: sliding layers still see min(window, p + 1) keys, full layers
    lose their maskless path to the padding, and no query reaches another row's tokens."""
    result = probe(gemma3, seq_len=32, batch_size=2, padding="right")
    rows = result.tables["layers"]
    sliding = [r for r in rows if r.layer_type == "sliding_attention"]
    full = [r for r in rows if r.layer_type == "full_attention"]
    assert [r.layer for r in full] == [2, 5] and len(sliding) == 4
    assert all(r.mask == "tensor" and not r.is_causal and not r.fast_path for r in rows)
    assert {(r.keys_min, r.keys_max) for r in sliding} == {brute_force_keys([32, 16], 32, window=WINDOW)}
    assert {(r.keys_min, r.keys_max) for r in full} == {brute_force_keys([32, 16], 32)}
    assert all(r.window == WINDOW for r in sliding) and all(r.window is None for r in full)
    assert all(r.band_ok and not r.cross_sequence for r in rows)


def test_gemma3_short_rows_let_sliding_layers_skip_the_mask(gemma3):
    result = probe(gemma3, seq_len=WINDOW - 2)
    assert all(r.mask == "none" and r.fast_path for r in result.tables["layers"])
    assert result.ok


def test_gemma3_packed_band_restarts_with_each_sequence(gemma3):
    result = probe(gemma3, seq_len=36, padding="packed", num_packed=2, use_cache=False)
    sliding = [r for r in result.tables["layers"] if r.window]
    assert {(r.keys_min, r.keys_max) for r in sliding} == {brute_force_keys([36], 36, WINDOW, [18, 18])}
    assert result.ok


def test_eager_receives_an_additive_mask_that_is_read_the_same_way(gemma3):
    result = probe(gemma3, seq_len=32, attn_implementation="eager")
    rows = result.tables["layers"]
    assert all(r.expected_backend == "eager" and not r.fast_path for r in rows)
    assert {(r.keys_min, r.keys_max) for r in rows if r.window} == {(1, WINDOW)}
    assert not result.ok  # fast_path_kept fails: eager has no maskless fast path


def test_fp32_training_loses_flash_and_the_check_fails(qwen3, capsys):
    assert main(["probe", "mask", "--checkpoint", str(qwen3), "--seq-len", "16", "--dtype", "float32"]) == 1
    assert "[FAIL] fast_path_kept" in capsys.readouterr().out


def test_cli_json_shape(gemma3, capsys):
    assert main(["probe", "mask", "--checkpoint", str(gemma3 / "config.json"), "--seq-len", "16", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"probe", "config", "summary", "tables", "checks"}
    assert len(out["tables"]["layers"]) == 6 and out["tables"]["layers"][0]["window"] == WINDOW
    assert {c["name"] for c in out["checks"]} == {"band_matches_window", "no_cross_sequence", "fast_path_kept"}


@pytest.mark.parametrize(
    "content, needle",
    [
        (None, "no config.json"),
        ("{not json", "unreadable config"),
        ("", "unreadable config: the file is empty"),
        (b"\xff\xfe{}", "unreadable config"),
        ('{"hidden_size": 4}', "field 'model_type' is missing"),
        ('{"model_type": "no-such-model"}', "field 'model_type' 'no-such-model'"),
        ('{"model_type": "qwen3", "num_hidden_layers": "many"}', "'num_hidden_layers'"),
    ],
)
def test_bad_config_is_one_line_exit_2(tmp_path, capsys, content, needle):
    if isinstance(content, bytes):
        (tmp_path / "config.json").write_bytes(content)
    elif content is not None:
        (tmp_path / "config.json").write_text(content)
    assert main(["probe", "mask", "--checkpoint", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and str(tmp_path) in err and "\n" not in err and len(err) < 500


def test_bad_cli_values_exit_2(qwen3, capsys):
    assert main(["probe", "mask", "--checkpoint", str(qwen3), "--seq-len", "0"]) == 2
    assert "--seq-len must be >= 2" in capsys.readouterr().err
    assert main(["probe", "mask", "--checkpoint", str(qwen3), "--padding", "left"]) == 2
    assert main(["probe", "nosuch"]) == 2
    assert "unknown probe 'nosuch'" in capsys.readouterr().err


def test_a_length_over_max_position_embeddings_is_refused_before_any_allocation(qwen3, capsys):
    # The fixture's max_position_embeddings is 4096. A billion tokens once allocated 24 GB and died.
    for seq_len in ("4097", "1000000000"):
        assert main(["probe", "mask", "--checkpoint", str(qwen3), "--seq-len", seq_len]) == 2
        err = capsys.readouterr().err.strip()
        assert err == (
            f"labprobe probe: error: --seq-len {seq_len} is over the model's max_position_embeddings 4096 ({qwen3})"
        )


def test_a_batch_larger_than_memory_is_refused_in_one_line(tmp_path, capsys):
    # A model that allows a million positions: 10^12 (row, query, key) cells cannot fit any machine.
    _small(Qwen3Config, num_hidden_layers=1).save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(
        (tmp_path / "config.json")
        .read_text()
        .replace('"max_position_embeddings": 4096', '"max_position_embeddings": 1000001')
    )
    assert main(["probe", "mask", "--checkpoint", str(tmp_path), "--seq-len", "1000000"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("labprobe probe: error: --seq-len 1000000 x --batch-size 1 needs about ")
    assert "GiB is available here" in err and "\n" not in err
    assert mask_calls.available_bytes() is not None  # on Linux the bound is really checked


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"hidden_size": 0}, "field 'hidden_size' must be >= 1, got 0"),
        ({"num_hidden_layers": 0, "layer_types": None}, "field 'num_hidden_layers' must be >= 1, got 0"),
        ({"num_attention_heads": -4}, "field 'num_attention_heads' must be >= 1, got -4"),
        ({"vocab_size": 0}, "field 'vocab_size' must be >= 1, got 0"),
        ({"intermediate_size": 2.5}, "field 'intermediate_size' must be a whole number, got 2.5"),
        ({"num_key_value_heads": 3}, "field 'num_key_value_heads' 3 does not divide num_attention_heads 4"),
        (
            {
                "model_type": "qwen2",
                "head_dim": None,
                "layer_types": None,
                "hidden_size": 66,
            },  # transformers lets it by
            "field 'num_attention_heads' 4 does not divide hidden_size 66 (and head_dim is unset)",
        ),
        ({"max_position_embeddings": 0}, "field 'max_position_embeddings' must be >= 1, got 0"),
    ],
)
def test_impossible_sizes_are_refused_naming_the_field(tmp_path, capsys, change, needle):
    raw = {
        k: v for k, v in {**_small(Qwen3Config, num_hidden_layers=2).to_dict(), **change}.items() if v is not None
    }  # None: the key left out
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert main(["probe", "mask", "--checkpoint", str(tmp_path), "--seq-len", "16"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"labprobe probe: error: {tmp_path / 'config.json'}: ") and "\n" not in err
    assert err.endswith(needle), err


def test_impossible_sizes_inside_text_config_name_their_nesting(tmp_path, capsys):
    text = _small(Gemma3TextConfig, num_hidden_layers=2, sliding_window=WINDOW, query_pre_attn_scalar=16)
    raw = Gemma3Config(text_config=text.to_dict()).to_dict()
    raw["text_config"]["hidden_size"] = 0
    (tmp_path / "config.json").write_text(json.dumps(raw))
    assert main(["probe", "mask", "--checkpoint", str(tmp_path), "--seq-len", "16"]) == 2
    assert "field 'text_config.hidden_size' must be >= 1, got 0" in capsys.readouterr().err
