#!/usr/bin/env bash
# Every GPU check in one call: issue 4's 4B profile and three-carrier bench, twice, at 4,096 and 16,384
# tokens a step (benchmarks/bench_gpu.py), the teammate's NVML idleness check if present, issue 24's
# no-regression check of NVML and `probe carrier`'s idle check (benchmarks/gpu_idle_regress.py), issue 15's
# variants, predicted then measured (benchmarks/bench_variants.py, about 6 minutes a shape), and issue 27's
# search for the fastest stack (benchmarks/bench_stacks.py) and the hours priced and replayed with it
# (benchmarks/bench_stack_hours_gpu.py).
# Runs from a plain checkout with no install (PYTHONPATH=.). Results go to $OUT (default
# benchmarks/results/out). Extra arguments go to bench_gpu.py (--quick: a smoke run; --profile-only: the 4B
# profile alone, e.g. a re-check of the kernel table and padding penalty). Probe options use one spelling:
# --seq-len (the production length), --fit-lens (the scaling list).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/out}
export PYTHONPATH=. PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore::FutureWarning
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,clocks.sm --format=csv
  if [ -f benchmarks/gpu_idle_check.py ]; then python3 benchmarks/gpu_idle_check.py --out "$OUT/idle.json"; fi
  # issue 24: every NVML field still read on a discrete card; a carrier run by hand checks idleness first
  python3 benchmarks/gpu_idle_regress.py --out "$OUT/idle_regress.json"
  begin=$(date +%s)
  python3 benchmarks/bench_gpu.py --out "$OUT" "$@"
  rc=$?
  python3 benchmarks/bench_goodput_gpu.py --out "$OUT" || rc=$?   # issue 16: CE memory model, replay vs goodput
  echo "[gpu_all.sh: bench_gpu.py exit $rc after $(( $(date +%s) - begin )) s]"
  # issue 26: dense Qwen3-4B vs hybrid Qwen3.5-0.8B with and without flash-linear-attention, and Qwen3-30B-A3B
  # (FLA_PATH: a folder holding flash-linear-attention, fla-core and einops, kept off the path until part 2)
  python3 benchmarks/bench_carriers_gpu.py --out "$OUT" ${FLA_PATH:+--fla-path "$FLA_PATH"} || rc=$?
  # issue 15: every variant of the step on the 4B at 1 x 4,096 and the 1.7B at 4 x 4,096, predicted then measured
  begin=$(date +%s)
  python3 benchmarks/bench_variants.py --out "$OUT" $([[ " $* " == *" --quick "* ]] && echo --quick)
  rc_variants=$?
  echo "[gpu_all.sh: bench_variants.py exit $rc_variants after $(( $(date +%s) - begin )) s]"
  [ "$rc" -eq 0 ] && rc=$rc_variants
  # issue 27: --search for the fastest stack on the same two shapes, with the numerics price (about 5-6 minutes a shape)
  for shape in 4b_1x4096 1.7b_4x4096; do
    begin=$(date +%s)
    python3 benchmarks/bench_stacks.py --out "$OUT" --shape "$shape"
    rc_stacks=$?
    echo "[gpu_all.sh: bench_stacks.py --shape $shape exit $rc_stacks after $(( $(date +%s) - begin )) s]"
    [ "$rc" -eq 0 ] && rc=$rc_stacks
  done
  # issue 27 item 6: the ruling's 4B voice priced with the best stack (carrier --search at 6 x 2,048) and the best
  # batching on the demo corpus, then replayed with that stack (benchmarks/bench_stack_hours_gpu.py; in two device
  # calls: --phase carrier, then --phase rest, with the same --out)
  begin=$(date +%s)
  python3 benchmarks/bench_stack_hours_gpu.py --out "$OUT/stack_hours"
  rc_hours=$?
  echo "[gpu_all.sh: bench_stack_hours_gpu.py exit $rc_hours after $(( $(date +%s) - begin )) s]"
  [ "$rc" -eq 0 ] && rc=$rc_hours
  exit $rc
} 2>&1 | tee "$OUT/gpu_log.txt"
exit "${PIPESTATUS[0]}"
