"""Speed of the CPU probes against issue 2's targets, on this machine.

Measured (wall clock, median of --repeats runs, each a whole `labprobe` CLI process unless noted):
- `mask` on demo/checkpoints/gemma-3-4b at 4,096 tokens (target <= 5 s), with a phase breakdown
  (imports, config, the recorded forward, the per-layer analysis) so that a miss names its cause;
- `padding` over --samples lengths from a Parquet lengths file (target <= 5 s);
- `bucket`, 10 bucket sizes x 4 seeds over the same lengths (target <= 20 s);
- tokenization throughput (samples/s, tokens/s) of a generated --samples corpus with the demo
  tokenizer (in-process, cold cache: JSON parsing, chat templates and tokenizing);
- the cached second run over that corpus: `labprobe probe padding --corpus ...` (target <= 2 s).

Other work on the machine inflates every figure: the script records the load average beside them.
`--write` puts the figures in the "## CPU probes" section of benchmarks/RESULTS.md (only that
section is replaced; the file is created with a title if missing).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TOKENIZER = ROOT / "demo" / "checkpoints" / "qwen3-0.6b-base"
GEMMA = ROOT / "demo" / "checkpoints" / "gemma-3-4b"
RESULTS = ROOT / "benchmarks" / "RESULTS.md"
SECTION = "## CPU probes"

MASK_BREAKDOWN = r"""
import json, time, cProfile, pstats
t0 = time.perf_counter()
import torch, transformers
from pathlib import Path
from probes.mask import probe as mask
t1 = time.perf_counter()
from transformers import AttentionInterface, AutoModelForCausalLM
from transformers.masking_utils import AttentionMaskInterface
config = mask.Config(checkpoint=Path(%r), seq_len=4096)
text = mask.load_text_config(config.checkpoint)
t2 = time.perf_counter()
profile = cProfile.Profile(); profile.enable()
calls, batch = mask.record_forward(config, text)
profile.disable()
t3 = time.perf_counter()
rows = mask.layer_rows(config, text, calls, batch)
t4 = time.perf_counter()
mask.record_forward(config, text)
t5 = time.perf_counter()
stats = pstats.Stats(profile).sort_stats("cumulative")
imports = sum(v[3] for f, v in stats.stats.items() if f[2] == "_find_and_load")
print(json.dumps({"imports_s": t1 - t0, "model_imports_config_s": t2 - t1, "forward_s": t3 - t2,
                  "forward_lazy_imports_s": imports, "analysis_s": t4 - t3, "second_forward_s": t5 - t4}))
"""


def cli_seconds(args: list[str], repeats: int) -> list[float]:
    """Wall time of whole `labprobe` processes (interpreter start and imports included)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "runner.cli", *args],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            raise SystemExit(f"labprobe {' '.join(args)} exited {done.returncode}: {done.stderr[-500:]}")
    return times


def make_lengths(path: Path, num: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    parts = {"qa": (0.4, 4.2, 0.5), "chat": (0.3, 5.5, 0.6), "code": (0.2, 6.2, 0.8), "books": (0.1, 7.0, 1.0)}
    lengths, sources = [], []
    for name, (share, mu, sigma) in parts.items():
        k = int(num * share) if name != "books" else num - sum(len(s) for s in sources)
        lengths.append(np.maximum(1, rng.lognormal(mu, sigma, k)).astype(np.int64))
        sources.append(np.full(k, name))
    order = rng.permutation(num)
    pq.write_table(pa.table({"length": np.concatenate(lengths)[order], "source": np.concatenate(sources)[order]}), path)


def make_corpus(path: Path, num: int) -> None:
    """Short records (about 28 words) so that 1,000,000 of them tokenize in reasonable time."""
    sys.path.insert(0, str(ROOT / "demo"))
    import random

    from make_demo import make_words

    words = np.array(make_words(random.Random(1), 3000))
    weights = 1 / np.arange(1, words.size + 1)
    rng = np.random.default_rng(1)
    kinds = rng.choice(4, num, p=[0.4, 0.4, 0.15, 0.05])
    sizes = np.maximum(3, rng.lognormal(np.log([20, 18, 36, 90])[kinds], 0.5)).astype(np.int64)
    drawn = words[rng.choice(words.size, int(sizes.sum()), p=weights / weights.sum())]
    cuts = np.concatenate([[0], np.cumsum(sizes)])
    with path.open("w", encoding="utf-8") as f:
        for i in range(num):
            text = " ".join(drawn[cuts[i] : cuts[i + 1]])
            if kinds[i] == 0:
                half = text.find(" ", len(text) // 3)
                record = {
                    "messages": [
                        {"role": "user", "content": text[:half]},
                        {"role": "assistant", "content": text[half + 1 :]},
                    ],
                    "source": "qa",
                }
            else:
                record = {"text": text, "source": ("web", "code", "books")[kinds[i] - 1]}
            f.write(json.dumps(record) + "\n")


def bench_tokenize(corpus_path: Path, cache: Path) -> dict:
    from probes.corpus import lengths as corpus
    from probes.corpus import records as corpus_records

    start = time.perf_counter()
    corpus.load_tokenizer(TOKENIZER)  # once, so the figure below is not the transformers import
    load_tokenizer_s = time.perf_counter() - start
    start = time.perf_counter()
    records = corpus_records.read_corpus(corpus_path)
    parse_s = time.perf_counter() - start
    del records
    start = time.perf_counter()
    data = corpus.load(corpus=corpus_path, lengths=None, checkpoint=TOKENIZER, cache_dir=cache)
    total_s = time.perf_counter() - start
    assert data.origin == "tokenized"
    start = time.perf_counter()
    again = corpus.load(corpus=corpus_path, lengths=None, checkpoint=TOKENIZER, cache_dir=cache)
    cached_s = time.perf_counter() - start
    assert again.origin == "cache"
    tokens = int(data.length.sum())
    return {
        "samples": data.num_samples,
        "tokens": tokens,
        "parse_s": parse_s,
        "cold_s": total_s,
        "load_tokenizer_s": load_tokenizer_s,
        "samples_per_s": data.num_samples / total_s,
        "tokens_per_s": tokens / total_s,
        "cached_load_s": cached_s,
        "corpus_bytes": corpus_path.stat().st_size,
    }


def versions() -> str:
    import pyarrow
    import tokenizers
    import torch
    import transformers

    return (
        f"Python {platform.python_version()}, numpy {np.__version__}, pyarrow {pyarrow.__version__}, "
        f"tokenizers {tokenizers.__version__}, transformers {transformers.__version__}, torch {torch.__version__}"
    )


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def run(args: argparse.Namespace, work: Path) -> tuple[list[tuple], dict]:
    n = args.samples
    lengths_file, corpus_file = work / "lengths.parquet", work / "corpus.jsonl"
    cache = Path(tempfile.mkdtemp(prefix="cache-", dir=work))  # cold: tokenization is measured
    if not lengths_file.exists():
        make_lengths(lengths_file, n)
    if not corpus_file.exists():
        print(f"generating a {n:,}-record corpus ...", flush=True)
        make_corpus(corpus_file, n)
    load_before = os.getloadavg()[0]
    rows: list[tuple] = []

    mask_t = cli_seconds(["probe", "mask", "--checkpoint", str(GEMMA), "--seq-len", "4096"], args.repeats)
    rows.append(("mask, Gemma-3-4B config, 4,096 tokens (CLI process)", mask_t, 5.0))
    pad_t = cli_seconds(["probe", "padding", "--lengths", str(lengths_file), "--vocab-size", "151936"], args.repeats)
    rows.append((f"padding, {n:,} samples from a lengths file (CLI process)", pad_t, 5.0))
    bucket_t = cli_seconds(
        ["probe", "bucket", "--lengths", str(lengths_file), "--num-sizes", "10", "--seed", "0", "1", "2", "3"],
        args.repeats,
    )
    rows.append((f"bucket sweep, 10 sizes x 4 seeds, {n:,} samples (CLI process)", bucket_t, 20.0))
    print("tokenizing (cold cache) ...", flush=True)
    tok = bench_tokenize(corpus_file, cache)
    cached_t = cli_seconds(
        ["probe", "padding", "--corpus", str(corpus_file), "--checkpoint", str(TOKENIZER), "--cache-dir", str(cache)],
        args.repeats,
    )
    rows.append((f"padding, cached second run over {n:,} corpus samples (CLI process)", cached_t, 2.0))
    breakdown = json.loads(
        subprocess.run(
            [sys.executable, "-c", MASK_BREAKDOWN % str(GEMMA)], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.splitlines()[-1]
    )
    shutil.rmtree(cache, ignore_errors=True)
    extra = {"tokenize": tok, "mask_breakdown": breakdown, "load": (load_before, os.getloadavg()[0])}
    return rows, extra


def report(rows: list[tuple], extra: dict, repeats: int) -> str:
    tok, mb = extra["tokenize"], extra["mask_breakdown"]
    lines = [
        SECTION,
        "",
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} cores ({cpu_model()}); {versions()}.",
        f"Load average {extra['load'][0]:.1f} before and {extra['load'][1]:.1f} after: other work shared the "
        "cores, so these are upper bounds; re-run on a quiet machine for the record.",
        f"`python benchmarks/bench_cpu_probes.py --repeats {repeats}`; median of {repeats} runs, wall "
        "clock of a whole `labprobe` process (interpreter start and imports included).",
        "",
        "| measurement | median s | runs s | target s | holds |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {name} | {statistics.median(runs):.2f} | {', '.join(f'{t:.2f}' for t in runs)} | <= {target:g} | "
        f"{'yes' if statistics.median(runs) <= target else 'NO'} |"
        for name, runs, target in rows
    ]
    lines += [
        "",
        f"Tokenization, cold cache, in-process: {tok['samples']:,} records ({tok['corpus_bytes'] / 1e6:.0f} MB "
        f"JSONL, {tok['tokens']:,} tokens, 40% chat records rendered with the chat template) in {tok['cold_s']:.1f} s: "
        f"**{tok['samples_per_s']:,.0f} samples/s, {tok['tokens_per_s']:,.0f} tokens/s** "
        f"(of which JSON parsing {tok['parse_s']:.1f} s; loading the tokenizer the first time, transformers "
        f"import included, took another {tok['load_tokenizer_s']:.1f} s); the cached load alone "
        f"{tok['cached_load_s']:.2f} s (the corpus's content hash is remembered per path, size and mtime, "
        "so only the lengths Parquet is read).",
        "",
        f"`mask` phases (one process, in-process timers): import torch + transformers + probes.mask.probe "
        f"{mb['imports_s']:.2f} s; AutoModelForCausalLM/masking imports + config {mb['model_imports_config_s']:.2f} s; "
        f"first recorded forward {mb['forward_s']:.2f} s (of which lazy imports inside it "
        f"{mb['forward_lazy_imports_s']:.2f} s; the rest is first-call warm-up of CPU kernels); per-layer "
        f"analysis {mb['analysis_s']:.2f} s; the same forward again, warm, {mb['second_forward_s']:.2f} s. "
        "The probe's own work is the warm forward plus the analysis; interpreter start-up, imports and "
        "first-call warm-up make up the rest of the CLI wall time.",
    ]
    return "\n".join(lines) + "\n"


def write_section(text: str, path: Path = RESULTS) -> None:
    """Replace only our section's text, from its heading line up to the next `## ` heading (or the
    end); every other section stays byte for byte. Headings match whole lines only, so a
    `### CPU probes` or a mention in prose is never taken for ours. Appended when missing."""
    current = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    heading = re.search(rf"^{re.escape(SECTION)}[ \t]*$", current, re.MULTILINE)
    if heading is None:
        path.write_text(current.rstrip("\n") + "\n\n" + text, encoding="utf-8")
        return
    following = re.compile(r"^## ", re.MULTILINE).search(current, heading.end())
    rest = current[following.start() :] if following else ""
    path.write_text(current[: heading.start()] + text + ("\n" + rest if rest else ""), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", type=Path, help="keep generated inputs here (default: a temp dir)")
    parser.add_argument("--write", action="store_true", help="write the section into benchmarks/RESULTS.md")
    args = parser.parse_args()
    if args.workdir:
        args.workdir.mkdir(parents=True, exist_ok=True)
        rows, extra = run(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="labprobe-bench-") as tmp:
            rows, extra = run(args, Path(tmp))
    text = report(rows, extra, args.repeats)
    print(text)
    if args.write:
        write_section(text)
        print(f"wrote the {SECTION!r} section of {RESULTS}")


if __name__ == "__main__":
    main()
