#!/usr/bin/env bash
# Issue 41's device call (one H100/H200, within 560 s): the stack search within the numerics tolerance
# (benchmarks/bench_stacks.py through benchmarks.harness_plain) on Qwen3-4B-Base 1 x 4,096, then Qwen3-1.7B-Base
# 4 x 4,096 (random weights from demo/checkpoints), each shape's files written into $OUT as soon as made
# ($OUT/<shape>/stacks_<shape>.json/.txt, workers.jsonl one line per finished process, log.txt).
# Carry .gpu-whl41 (benchmarks/gpu_41_wheels.sh: transformers 5.25, peft 0.21.2, pydantic, liger-kernel, torchao;
# ~37 MiB), installed to /tmp/site41 first on PYTHONPATH; without it the image's own packages are used.
# Candidates: C4B and C17B (space-separated; `compile+fused-adamw` is one candidate measured in one process, so
# the 1.7B reaches its stack in 4 processes), budgets B4B (seconds of the 4B's search; the 1.7B gets what is
# left less 25 s). GPU41_SHAPES: which of the two (default both). GPU41_LIMIT: the seconds the whole call may take
# (560). GPU41_DRY=1: the same commands on tiny configs on the CPU (their plumbing, not their figures).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
OUT=${OUT:-benchmarks/results/out41}
LIMIT=${GPU41_LIMIT:-560}
mkdir -p "$OUT"
left() { echo $((LIMIT - ($(date +%s) - start))); }
# a timeout of at most $1 s within what is left less `timeout -k 10`'s 10 s (its KILL lands within the call too)
within() { local l n; l=$(($(left) - 10)); n=$(($1 < l ? $1 : l)); echo $((n > 1 ? n : 1)); }
if [ -d .gpu-whl41 ] && [ -z "${GPU41_DRY:-}" ]; then # the device image: Python 3.12
  timeout -k 5 60 python3 -m pip install -q --no-index --no-deps --target /tmp/site41 .gpu-whl41/*.whl \
    >"$OUT/pip.txt" 2>&1 || echo "[gpu_41.sh: pip install exit $?: see pip.txt]"
  export PYTHONPATH=/tmp/site41
fi
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
C4B=${C4B:-bf16-autocast compile+fused-adamw bf16-adapters}
C17B=${C17B:-bf16-autocast compile+fused-adamw}
B4B=${B4B:-265}
common=(--processes 1 --numerics-steps 12 --steps 5 --max-steps 8)
if [ -n "${GPU41_DRY:-}" ]; then # tiny stand-ins, no compile (a CPU compile takes minutes)
  tiny=$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from pathlib import Path
from bench_stack_hours_gpu import tiny_checkpoint; print(tiny_checkpoint(Path(sys.argv[1])))' "$OUT")
  C4B=${C4B//compile+fused-adamw/fused-adamw} C17B=${C17B//compile+fused-adamw/fused-adamw}
  common=(--processes 1 --numerics-steps 3 --steps 2 --max-steps 2)
fi
{
  nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,clocks.sm --format=csv 2>&1
  python3 -c 'import importlib.metadata as m
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return "absent"
print(*(f"{n} {version(n)}" for n in ("torch", "triton", "transformers", "peft", "liger-kernel", "torchao")))'
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
rc=0
shape() { # name, candidates, budget
  mkdir -p "$OUT/$1"
  if [ "$3" -lt 60 ]; then # no room for a baseline and one candidate: say so rather than start what cannot end
    echo "[gpu_41.sh: $1 not run: $3 s of search budget left]" | tee "$OUT/$1/log.txt"
    rc=1
    return
  fi
  local shape_env=()
  [ -n "${GPU41_DRY:-}" ] && shape_env=(BENCH_SHAPES="$tiny:2:64")
  # shellcheck disable=SC2086 # the candidates are words
  env "${shape_env[@]}" timeout -k 10 "$(within $(($3 + 30)))" python3 benchmarks/bench_stacks.py --out "$OUT/$1" \
    --shape "$1" --candidates $2 --budget-s "$3" "${common[@]}" >"$OUT/$1/log.txt" 2>&1
  local r=$?
  echo "[gpu_41.sh: $1 exit $r at $(($(date +%s) - start)) s]" | tee -a "$OUT/$1/log.txt"
  grep -E '^\[(ok|FAIL)\]' "$OUT/$1/log.txt"
  [ "$r" -ne 0 ] && rc=$r
}
SHAPES=${GPU41_SHAPES:-4b_1x4096 1.7b_4x4096}
[[ " $SHAPES " == *" 4b_1x4096 "* ]] && shape 4b_1x4096 "$C4B" "$B4B"
[[ " $SHAPES " == *" 1.7b_4x4096 "* ]] && shape 1.7b_4x4096 "$C17B" "$(($(left) - 25 - 30))"
echo "[gpu_41.sh: done at $(($(date +%s) - start)) s, exit $rc]"
exit $rc
