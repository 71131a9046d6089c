#!/usr/bin/env bash
# Issue 41's second device call (one H100/H200, within 560 s): the stack search within the numerics tolerance on
# the lab's other carriers, each shape's files into $OUT as soon as made (as benchmarks/gpu_41.sh):
# - hybrid_0.8b_1x4096: Qwen3.5-0.8B through benchmarks.harness_plain with flash-linear-attention 0.6.0 (from the
#   carried wheels; its #640 guard lifted as benchmarks/make_gpu_site.sh does, LABPROBE_LIFT_FLA_640=1: the image's
#   Triton 3.6.0 is below the 3.7.1 fla asks for on Hopper; fla_check found its gradients right at T 512 on an H100)
#   and benchmarks/conv_shim (fla's Triton conv as causal_conv1d: no wheel of causal-conv1d exists). Its step is
#   launch-bound (46% GPU-busy on an H100), so cuda-graphs is tried there;
# - moe_30b_a3b_24l_1x4096: Qwen3-30B-A3B-Base's widths and 128 experts, 24 of its 48 layers, LoRA on attention
#   (benchmarks.harness_attention_lora: the reference step, bf16 autocast and fused AdamW already).
# Carry .gpu-whl41 (benchmarks/gpu_41_wheels.sh). CH, CM: the candidates; BH: the hybrid's budget (the MoE gets
# what is left less 25 s); GPU41_SHAPES: "hybrid moe" (default) or one of them; GPU41_LIMIT (560). GPU41_DRY=1 runs the same commands on the tests' tiny hybrid and
# MoE configs on the CPU (transformers' torch fallbacks instead of fla; their plumbing, not their figures).
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
OUT=${OUT:-benchmarks/results/out41h}
LIMIT=${GPU41_LIMIT:-560}
mkdir -p "$OUT"
left() { echo $((LIMIT - ($(date +%s) - start))); }
within() { local l n; l=$(($(left) - 10)); n=$(($1 < l ? $1 : l)); echo $((n > 1 ? n : 1)); }
site=/tmp/site41
if [ -d .gpu-whl41 ] && [ -z "${GPU41_DRY:-}" ]; then # the device image: Python 3.12
  timeout -k 5 60 python3 -m pip install -q --no-index --no-deps --target $site .gpu-whl41/*.whl \
    >"$OUT/pip.txt" 2>&1 || echo "[gpu_41_hybrid.sh: pip install exit $?: see pip.txt]"
  # fla 0.6.0's #640 guard, made to read LABPROBE_LIFT_FLA_640 (the same one `if` as benchmarks/make_gpu_site.sh)
  python3 - "$site/fla/ops/common/chunk_o.py" <<'EOF' || echo "[gpu_41_hybrid.sh: fla's guard not lifted]"
import sys
path = sys.argv[1]
text = open(path).read()
guard = "if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:"
lifted = guard[:-1] + ' and not __import__("os").environ.get("LABPROBE_LIFT_FLA_640"):'
if lifted not in text:
    assert text.count(guard) == 1, "fla 0.6.0's #640 guard not found where expected"
    open(path, "w").write(text.replace(guard, lifted))
EOF
fi
export LABPROBE_LIFT_FLA_640=1 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
export PYTHONPATH=.:$site:benchmarks/conv_shim
CH=${CH:-bf16-autocast compile+fused-adamw cuda-graphs liger}
CM=${CM:-compile float8 liger}
BH=${BH:-265}
common=(--processes 1 --numerics-steps 12 --steps 5 --max-steps 8)
if [ -n "${GPU41_DRY:-}" ]; then # the tests' tiny hybrid and MoE configs, no compile
  export PYTHONPATH=.
  python3 -c 'import sys; sys.path.insert(0, "tests/probes"); from pathlib import Path
from conftest import write_family
for name, kind in (("hybrid", "qwen3_5_text"), ("moe", "qwen3_moe")):
    (Path(sys.argv[1]) / name).mkdir(parents=True, exist_ok=True); write_family(Path(sys.argv[1]) / name, kind)' \
    "$OUT/tiny"
  CH=${CH//compile+fused-adamw/fused-adamw} CM=${CM//compile/micro-batch=1}
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
print(*(f"{n} {version(n)}" for n in ("torch", "triton", "transformers", "peft", "flash-linear-attention",
                                      "liger-kernel", "torchao")))'
} >"$OUT/environment.txt" 2>&1
cat "$OUT/environment.txt"
rc=0
shape() { # name, candidates, budget, tiny stand-in
  mkdir -p "$OUT/$1"
  if [ "$3" -lt 60 ]; then # no room for a baseline and one candidate: say so rather than start what cannot end
    echo "[gpu_41_hybrid.sh: $1 not run: $3 s of search budget left]" | tee "$OUT/$1/log.txt"
    rc=1
    return
  fi
  local shape_env=()
  [ -n "${GPU41_DRY:-}" ] && shape_env=(BENCH_SHAPES="$OUT/tiny/$4:2:64:$5")
  # shellcheck disable=SC2086 # the candidates are words
  env "${shape_env[@]}" timeout -k 10 "$(within $(($3 + 30)))" python3 benchmarks/bench_stacks.py --out "$OUT/$1" \
    --shape "$1" --candidates $2 --budget-s "$3" "${common[@]}" >"$OUT/$1/log.txt" 2>&1
  local r=$?
  echo "[gpu_41_hybrid.sh: $1 exit $r at $(($(date +%s) - start)) s]" | tee -a "$OUT/$1/log.txt"
  grep -E '^\[(ok|FAIL)\]' "$OUT/$1/log.txt"
  [ "$r" -ne 0 ] && rc=$r
}
SHAPES=${GPU41_SHAPES:-hybrid moe}
[[ " $SHAPES " == *" hybrid "* ]] && shape hybrid_0.8b_1x4096 "$CH" "$BH" hybrid benchmarks.harness_plain
[[ " $SHAPES " == *" moe "* ]] &&
  shape moe_30b_a3b_24l_1x4096 "$CM" "$(($(left) - 25 - 30))" moe benchmarks.harness_attention_lora
echo "[gpu_41_hybrid.sh: done at $(($(date +%s) - start)) s, exit $rc]"
exit $rc
