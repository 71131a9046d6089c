"""Fixtures several probe test modules share."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from transformers import Qwen3Config

from runner.cli import main


def tiny_config(layers: int = 2) -> Qwen3Config:
    """A Qwen3 of `layers` layers, hidden 32, vocab 128: random weights build in ms."""
    return Qwen3Config(
        hidden_size=32,
        intermediate_size=48,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=128,
        num_hidden_layers=layers,
        tie_word_embeddings=True,
    )


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """The 2-layer tiny_config in a checkpoint folder."""
    path = tmp_path_factory.mktemp("tiny")
    tiny_config().save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    """A checkpoint folder holding the demo's BPE tokenizer (a copy: tests may add files beside it)."""
    path = tmp_path_factory.mktemp("tok") / "checkpoint"
    shutil.copytree(Path(__file__).resolve().parents[2] / "demo" / "tokenizer", path)
    return path


DATA = Path(__file__).resolve().parents[1] / "data"


@pytest.fixture
def lab_path(monkeypatch) -> Path:
    """tests/data on sys.path, as a lab's own harness modules are (harness_custom, harness_broken, ...)."""
    monkeypatch.syspath_prepend(str(DATA))
    return DATA


@pytest.fixture
def harness_calls(lab_path, monkeypatch, tmp_path) -> Path:
    """The file tests/data's harnesses append their calls to (LABPROBE_TEST_CALLS_FILE), read back by the test:
    it is written by the worker process that measured, so it shows what really ran."""
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("LABPROBE_TEST_CALLS_FILE", str(calls))
    return calls


DEMO = Path(__file__).resolve().parents[2] / "demo"


@pytest.fixture
def demo_json(tmp_path, capsys):
    """`demo_json(probe, checkpoint, *options, exit_code=0)`: `labprobe probe PROBE --json` over the demo
    corpus, tokenized by demo/checkpoints/CHECKPOINT (its length cache in tmp_path); the parsed output,
    once its exit code and its keys are the contract's."""

    def run(probe: str, checkpoint: str, *options: str, exit_code: int = 0) -> dict:
        argv = [
            "probe",
            probe,
            "--checkpoint",
            str(DEMO / "checkpoints" / checkpoint),
            "--corpus",
            str(DEMO / "corpus.jsonl"),
            "--cache-dir",
            str(tmp_path),
            *options,
            "--json",
        ]
        assert main(argv) == exit_code
        out = json.loads(capsys.readouterr().out)
        assert set(out) == {"probe", "config", "summary", "tables", "checks"}
        return out

    return run


# Tiny configs of the other families (layer types, head_dims and experts as the real ones, widths of a
# few dozen): hybrid linear attention (Qwen3.5), mixture of experts (Qwen3-MoE, Gemma-4).
TINY_FAMILIES = {
    "qwen3_5_text": dict(
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        vocab_size=128,
        tie_word_embeddings=True,
    ),
    "qwen3_moe": dict(
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=16,
        num_experts=4,
        num_experts_per_tok=2,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        vocab_size=128,
        tie_word_embeddings=False,
    ),
    "gemma4_text": dict(
        hidden_size=32,
        intermediate_size=48,
        moe_intermediate_size=16,
        enable_moe_block=True,
        num_experts=4,
        top_k_experts=2,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        num_global_key_value_heads=1,
        attention_k_eq_v=True,
        sliding_window=8,
        layer_types=["sliding_attention", "full_attention"],
        hidden_size_per_layer_input=0,
        vocab_size=128,
        tie_word_embeddings=True,
    ),
}


def write_family(path: Path, model_type: str) -> Path:
    from transformers import AutoConfig

    AutoConfig.for_model(model_type, **TINY_FAMILIES[model_type]).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def hybrid(tmp_path_factory) -> Path:
    """Qwen3.5 text: linear, linear, linear, full attention."""
    return write_family(tmp_path_factory.mktemp("hybrid"), "qwen3_5_text")


@pytest.fixture(scope="module")
def qwen3_moe(tmp_path_factory) -> Path:
    return write_family(tmp_path_factory.mktemp("qwen3moe"), "qwen3_moe")


@pytest.fixture(scope="module")
def gemma4_moe(tmp_path_factory) -> Path:
    """Gemma-4 text: a sliding layer (head_dim 16) and a full one (head_dim 32, keys = values), MoE."""
    return write_family(tmp_path_factory.mktemp("gemma4"), "gemma4_text")
