#!/usr/bin/env bash
# Issue 41's float8 check on one H100/H200 (within 560 s): is labprobe's compiled float8-frozen the same arithmetic
# as its eager one? 1) benchmarks/fp8_check.py: one projection of the 4B's widths, bf16 against FrozenFloat8Linear
# eager and compiled and torchao's Float8Linear compiled (cosines and ms); 2) carrier on Qwen3-4B-Base 1 x 4,096
# (harness_plain, 12 numerics steps): float8-frozen compiled, and on the search's winner stack, their
# numerics beside the baseline's. Carry .gpu-whl41 (benchmarks/gpu_41_wheels.sh). Files land in $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/out41fp8}
mkdir -p "$OUT"
if [ -d .gpu-whl41 ]; then
  timeout -k 5 60 python3 -m pip install -q --no-index --no-deps --target /tmp/site41 .gpu-whl41/*.whl \
    >"$OUT/pip.txt" 2>&1 || echo "[gpu_41_fp8.sh: pip install exit $?: see pip.txt]"
  export PYTHONPATH=/tmp/site41
fi
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
timeout -k 5 150 python3 benchmarks/fp8_check.py --out "$OUT/fp8_check.json" 2>&1 | tee "$OUT/fp8_check.txt"
timeout -k 10 380 python3 -m runner.cli probe carrier --checkpoint demo/checkpoints/qwen3-4b-base --weights random \
  --harness benchmarks.harness_plain --batch-size 1 --seq-len 4096 --warmup-steps 2 --steps 5 --max-steps 8 \
  --processes 1 --numerics-steps 12 ${FP8_VARIANTS:---variant compile+float8-frozen \
  --variant bf16-autocast+compile+float8-frozen+fused-adamw} >"$OUT/carrier.txt" 2>&1
echo "[gpu_41_fp8.sh: carrier exit $?]"
grep -A12 "carrier.numerics" "$OUT/carrier.txt" | cut -c1-240
