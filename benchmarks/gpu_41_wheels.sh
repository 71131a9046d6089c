#!/usr/bin/env bash
# Fills .gpu-whl41 (git-ignored) for issue 41's device calls: the wheels of benchmarks/make_gpu_wheels.sh (.whl:
# transformers 5.25 and huggingface-hub 2.4 with what they import, peft 0.21.2, pydantic, liger-kernel 0.8.5,
# fla 0.6.0) plus torchao 0.18.0 (pure Python, py3-none-any; its float8 training path needs torch >= 2.11). Both
# calls carry it (about 37 MiB of the 64 a call carries): gpu_41.sh installs every wheel but fla's, and
# gpu_41_hybrid.sh unpacks fla's apart to lift its #640 guard.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .whl ] || bash benchmarks/make_gpu_wheels.sh
rm -rf .gpu-whl41 && mkdir .gpu-whl41 # afresh: a wheel left from another version would clash
for f in .whl/*.whl; do ln -f "$f" .gpu-whl41/; done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform any -d .gpu-whl41 torchao==0.18.0
ls .gpu-whl41 | wc -l && du -sh .gpu-whl41
