#!/usr/bin/env bash
# Forked measurement processes (probes.step.variants.preload) against spawned ones, on one GPU in one lease:
# the same carrier rows (Qwen3-1.7B-Base 1 x 2,048, random weights, harness_plain; the baseline in 3 processes
# and compile+fused-adamw), each run with its own empty Inductor cache, with LABPROBE_PRELOAD=1 then 0. Their step
# times must agree within the spread across processes, and the forked run must be faster by the imports. Carry .gpu-whl41 (benchmarks/gpu_41_wheels.sh).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/outpreload}
mkdir -p "$OUT"
WHEELS=${WHEELS:-.gpu-whl41}
if [ -d "$WHEELS" ]; then
  timeout -k 5 60 python3 -m pip install -q --no-index --no-deps --target /tmp/site41 "$WHEELS"/*.whl \
    >"$OUT/pip.txt" 2>&1 || echo "[gpu_preload.sh: pip install exit $?: see pip.txt]"
  export PYTHONPATH=/tmp/site41
fi
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
# the CLI with probes.step.variants.processes' INFO lines (each process's wall and stages) on stderr
DRIVER='import logging, sys; logging.basicConfig(level=logging.INFO); from runner.cli import main; sys.exit(main(sys.argv[1:]))'
for preload in 1 0; do
  start=$(date +%s)
  TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-preload$preload-$$ LABPROBE_PRELOAD=$preload timeout -k 10 250 python3 -c "$DRIVER" probe carrier \
    --checkpoint ${CKPT:-demo/checkpoints/qwen3-1.7b-base} --weights random --harness benchmarks.harness_plain \
    --batch-size 1 --seq-len ${SEQ:-2048} --warmup-steps 3 --steps 10 --max-steps 10 --processes ${PROCS:-3} --numerics-steps 0 \
    --variant compile+fused-adamw --json >"$OUT/carrier_preload$preload.json" 2>"$OUT/carrier_preload$preload.log"
  echo "[preload=$preload: exit $?, $(( $(date +%s) - start )) s]"
  grep -E "in the process" "$OUT/carrier_preload$preload.log" | sed 's/.*processes://' | cut -c1-220
done
