#!/usr/bin/env bash
# Fills .whl (git-ignored) with the wheels the H200 image lacks, for Python 3.12 x86_64: the image has torch 2.11,
# Triton 3.6.0, transformers 5.17, peft, accelerate, pandas, pyarrow and nvidia-ml-py, but no registry.
# transformers 5.25 (the hybrid and MoE configs), huggingface-hub 2.x and what it imports, peft 0.21, pydantic
# (labprobe's configs), fla 0.6.0, liger-kernel, kernels. About 35 MiB. Installed on the device with
# `pip install --no-index --no-deps --target /tmp/site` (benchmarks/RESULTS.md, the plan for the next session).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any \
  -d .whl \
  transformers==5.25.0 huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 peft==0.21.2 \
  liger-kernel==0.8.5 fla-core==0.6.0 flash-linear-attention==0.6.0 'kernels<0.20,>=0.19.1' tomlkit \
  pydantic pydantic-core==2.50.5 annotated-types typing-inspection typing-extensions einops regex \
  anyio click filelock fsspec h11 hf-xet httpcore2 httpx2 idna packaging pyyaml tqdm truststore \
  typer rich shellingham markdown-it-py mdurl pygments annotated-doc
# .whl27: the same without fla (the calls that are not issue 26's install every wheel there; 1.4 MiB less, so
# causal-conv1d's 20.5 MiB rides beside it under the 64 MiB a call carries)
rm -rf .whl27 && mkdir .whl27 && for f in .whl/*.whl; do  # afresh: a wheel left from another version would clash
  case $(basename "$f") in fla_core-* | flash_linear_attention-*) ;; *) ln -f "$f" .whl27/ ;; esac
done
ls .whl | wc -l && du -sh .whl .whl27
