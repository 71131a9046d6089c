"""Fixtures several probe test modules share."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from transformers import Qwen3Config


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A 2-layer Qwen3 config (hidden 32, vocab 128) in a checkpoint folder: random weights build in ms."""
    path = tmp_path_factory.mktemp("tiny")
    Qwen3Config(hidden_size=32, intermediate_size=48, num_attention_heads=2, num_key_value_heads=1,
                head_dim=16, vocab_size=128, num_hidden_layers=2, tie_word_embeddings=True).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A checkpoint folder holding the demo's BPE tokenizer (a copy: tests may add files beside it)."""
    path = tmp_path_factory.mktemp("tok") / "checkpoint"
    shutil.copytree(Path(__file__).resolve().parents[2] / "demo" / "tokenizer", path)
    return path
