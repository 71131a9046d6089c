"""Build the demo data deterministically: `python demo/make_demo.py` rewrites demo/ in place.

- `corpus.jsonl`: four sources with distinct length distributions (seeded, pseudo-words drawn with
  Zipf frequencies so that BPE has something to learn): `qa` (short single-turn chats), `chat`
  (multi-turn chats), `code` (medium text with a tail) and `books` (long, heavy-tailed text; some
  rows exceed 2,048 tokens so that truncation shows). `messages` and `text` records are mixed.
- `tokenizer/`: a byte-level BPE (4,096 tokens) trained here on that corpus with `tokenizers`,
  saved as a Hugging Face tokenizer directory (ChatML chat template) that
  `AutoTokenizer.from_pretrained(dir, local_files_only=True)` loads offline.
- `checkpoints/<name>/config.json`: config-only checkpoints of real architectures (values from
  the models' published configs), each with a copy of the demo tokenizer so `--checkpoint` works
  for the corpus probes. The configs keep their real vocabulary sizes (CE sizing reads them).
"""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20261203
VOCAB_SIZE = 4096
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content']"
    " + '<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
# source -> (records, kind, median words, log-normal sigma)
SOURCES = {
    "qa": (600, "messages", 28, 0.45),
    "chat": (400, "messages", 120, 0.6),
    "code": (200, "text", 220, 0.7),
    "books": (100, "text", 650, 0.75),
}


def make_words(rng: random.Random, num: int) -> list[str]:
    syllables = [c + v for c in "bcdfghklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou")]
    words: set[str] = set()
    while len(words) < num:
        words.add("".join(rng.choice(syllables) for _ in range(rng.choice((1, 2, 2, 3, 3, 4)))))
    return sorted(words)


class Writer:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.words = make_words(rng, 3000)
        self.weights = [1 / (i + 1) for i in range(len(self.words))]  # Zipf

    def num_words(self, median: int, sigma: float) -> int:
        return max(3, int(median * math.exp(self.rng.gauss(0, sigma))))

    def prose(self, num: int) -> str:
        out, sentence = [], 0
        for word in self.rng.choices(self.words, self.weights, k=num):
            out.append(word.capitalize() if sentence == 0 else word)
            sentence += 1
            if sentence > self.rng.randint(6, 18):
                out[-1] += "."
                sentence = 0
        return " ".join(out) + "."

    def code(self, num: int) -> str:
        lines, left = [], num
        while left > 0:
            n = min(left, self.rng.randint(2, 8))
            names = self.rng.choices(self.words, self.weights, k=n)
            indent = "    " * self.rng.randint(0, 3)
            lines.append(f"{indent}{names[0]} = {names[-1]}(" + ", ".join(names[1:-1]) + ")")
            left -= n
        return "\n".join(lines)

    def chat(self, median: int, sigma: float, turns: int) -> list[dict[str, str]]:
        messages = []
        for _t in range(turns):
            messages.append({"role": "user", "content": self.prose(self.num_words(median // 3, sigma))})
            messages.append({"role": "assistant", "content": self.prose(self.num_words(median, sigma))})
        return messages


def make_corpus(path: Path) -> int:
    rng = random.Random(SEED)
    writer = Writer(rng)
    records = []
    for source, (num, kind, median, sigma) in SOURCES.items():
        for _ in range(num):
            if kind == "messages":
                turns = 1 if source == "qa" else rng.randint(1, 4)
                records.append({"messages": writer.chat(median // turns, sigma, turns), "source": source})
            else:
                size = writer.num_words(median, sigma)
                text = writer.code(size) if source == "code" else writer.prose(size)
                records.append({"text": text, "source": source})
    rng.shuffle(records)
    with path.open("w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return len(records)


def training_texts(path: Path):
    for line in path.open(encoding="utf-8"):
        record = json.loads(line)
        if "text" in record:
            yield record["text"]
        else:
            yield from (m["content"] for m in record["messages"])


def make_tokenizer(corpus: Path, out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(training_texts(corpus), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, eos_token=SPECIAL[0], pad_token=SPECIAL[0], model_max_length=32768
    )
    shutil.rmtree(out, ignore_errors=True)
    fast.save_pretrained(out)
    # Keep the chat template inside tokenizer_config.json (the layout most hub checkpoints ship).
    (out / "chat_template.jinja").unlink(missing_ok=True)
    config = json.loads((out / "tokenizer_config.json").read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config["tokenizer_class"] = "PreTrainedTokenizerFast"  # loads on transformers 4.x and 5.x
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def qwen3(hidden: int, intermediate: int, layers: int, heads: int) -> dict:
    """Qwen3-*-Base config.json as published (docs/measurement.md: real configs)."""
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "head_dim": 128,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": intermediate,
        "max_position_embeddings": 32768,
        "max_window_layers": layers,
        "model_type": "qwen3",
        "num_attention_heads": heads,
        "num_hidden_layers": layers,
        "num_key_value_heads": 8,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": 151936,
    }


def gemma3_4b() -> dict:
    """Gemma-3-4B's multimodal config.json: the decoder sits under text_config."""
    layers = 34
    layer_types = ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)]
    return {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "boi_token_index": 255999,
        "eoi_token_index": 256000,
        "eos_token_id": [1, 106],
        "image_token_index": 262144,
        "initializer_range": 0.02,
        "mm_tokens_per_image": 256,
        "model_type": "gemma3",
        "text_config": {
            "attention_bias": False,
            "attention_dropout": 0.0,
            "attn_logit_softcapping": None,
            "final_logit_softcapping": None,
            "head_dim": 256,
            "hidden_activation": "gelu_pytorch_tanh",
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "layer_types": layer_types,
            "max_position_embeddings": 131072,
            "model_type": "gemma3_text",
            "num_attention_heads": 8,
            "num_hidden_layers": layers,
            "num_key_value_heads": 4,
            "query_pre_attn_scalar": 256,
            "rms_norm_eps": 1e-06,
            "rope_local_base_freq": 10000.0,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            "rope_theta": 1000000.0,
            "sliding_window": 1024,
            "tie_word_embeddings": True,
            "use_cache": True,
            "vocab_size": 262208,
        },
        "torch_dtype": "bfloat16",
        "transformers_version": "4.50.0.dev0",
        "vision_config": {
            "hidden_size": 1152,
            "image_size": 896,
            "intermediate_size": 4304,
            "model_type": "siglip_vision_model",
            "num_attention_heads": 16,
            "num_hidden_layers": 27,
            "patch_size": 14,
            "vision_use_head": False,
        },
    }


def qwen3_5(
    hidden: int, intermediate: int, layers: int, heads: int, kv_heads: int, value_heads: int, tied: bool
) -> dict:
    """Qwen3.5 (hybrid: three Gated DeltaNet `linear_attention` layers, then one `full_attention`, as the class's
    default `full_attention_interval` 4 gives). The remaining fields are Qwen3_5TextConfig's defaults (head_dim 256,
    linear key heads 16 of 128, conv kernel 4, vocab 248,320); sizes from the published Qwen/Qwen3.5-0.8B and
    Qwen/Qwen3.5-27B configs (text part only: the vision tower does not train in a text LoRA run)."""
    return {
        "architectures": ["Qwen3_5ForCausalLM"],
        "model_type": "qwen3_5_text",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": 256,
        "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": value_heads,
        "layer_types": ["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)],
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-06,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25},
        "tie_word_embeddings": tied,
        "vocab_size": 248320,
        "eos_token_id": 248044,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def qwen3_30b_a3b() -> dict:
    """Qwen3-30B-A3B-Base: Qwen3MoeConfig's fields (its class defaults are a 24-layer 15B-A2B: 128 experts of
    768, 8 per token, as here) at the published 48 layers and 40,960 positions, norm_topk_prob true."""
    return {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "norm_topk_prob": True,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
        "num_hidden_layers": 48,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": False,
        "vocab_size": 151936,
        "bos_token_id": 151643,
        "eos_token_id": 151643,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


def gemma4_26b_a4b() -> dict:
    """Gemma-4 26B-A4B's text part (Gemma4TextConfig fields; sizes as published for google/gemma-4-26B-A4B):
    30 layers, five sliding (window 1,024, head_dim 256, 8 kv heads) to one full (global_head_dim 512, 2 kv
    heads, keys = values), each with a dense MLP of 2,112 beside 128 experts of 704, 8 per token."""
    layers = 30
    return {
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "hidden_size": 2816,
        "intermediate_size": 2112,
        "moe_intermediate_size": 704,
        "enable_moe_block": True,
        "num_experts": 128,
        "top_k_experts": 8,
        "num_hidden_layers": layers,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "num_global_key_value_heads": 2,
        "head_dim": 256,
        "global_head_dim": 512,
        "attention_k_eq_v": True,
        "layer_types": ["full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(layers)],
        "sliding_window": 1024,
        "hidden_size_per_layer_input": 0,
        "num_kv_shared_layers": 0,
        "final_logit_softcapping": 30.0,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-06,
        "tie_word_embeddings": True,
        "vocab_size": 262144,
        "torch_dtype": "bfloat16",
        "use_cache": True,
    }


CHECKPOINTS = {
    "qwen3-0.6b-base": qwen3(1024, 3072, 28, 16),
    "qwen3-1.7b-base": qwen3(2048, 6144, 28, 16),
    "qwen3-4b-base": qwen3(2560, 9728, 36, 32),
    "gemma-3-4b": gemma3_4b(),
    "qwen3.5-0.8b": qwen3_5(1024, 3584, 24, 8, 2, 16, tied=True),
    "qwen3.5-27b": qwen3_5(5120, 17408, 64, 24, 4, 48, tied=False),
    "qwen3-30b-a3b-base": qwen3_30b_a3b(),
    "gemma-4-26b-a4b": gemma4_26b_a4b(),
}


def make_checkpoints(root: Path, tokenizer: Path) -> None:
    for name, config in CHECKPOINTS.items():
        out = root / name
        shutil.rmtree(out, ignore_errors=True)
        shutil.copytree(tokenizer, out)
        (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def main() -> None:
    corpus = HERE / "corpus.jsonl"
    num = make_corpus(corpus)
    make_tokenizer(corpus, HERE / "tokenizer")
    make_checkpoints(HERE / "checkpoints", HERE / "tokenizer")
    print(f"wrote {corpus} ({num} records), {HERE / 'tokenizer'}, {len(CHECKPOINTS)} checkpoints")


if __name__ == "__main__":
    main()
