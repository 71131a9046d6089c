#!/usr/bin/env bash
# Every GPU check in one call: issue 4's 4B profile and three-carrier bench, twice, at 4,096 and 16,384
# tokens a step (benchmarks/bench_gpu.py), the teammate's NVML idleness check if present, issue 24's
# no-regression check of NVML and `probe carrier`'s idle check (benchmarks/gpu_idle_regress.py), issue 15's
# variants, predicted then measured (benchmarks/bench_variants.py, about 6 minutes a shape), and issue 27's
# search for the fastest stack (benchmarks/bench_stacks.py) and the hours priced and replayed with it
# (benchmarks/bench_stack_hours_gpu.py).
# `gpu_all.sh --next [26|27|hours]`: only what issues 26 and 27 still lack, a call each, hours two (see below);
# GPU_ALL_DRY=1 runs the same commands tiny on the CPU (their plumbing, not their figures; for 26 give three
# tiny config folders as BENCH_CHECKPOINTS=dense,hybrid,moe).
# The caller's PYTHONPATH (e.g. the carried wheels installed to /tmp/site) stays, after the checkout.
# Runs from a plain checkout with no install (PYTHONPATH=.). Results go to $OUT (default
# benchmarks/results/out). Extra arguments go to bench_gpu.py (--quick: a smoke run; --profile-only: the 4B
# profile alone, e.g. a re-check of the kernel table and padding penalty). Probe options use one spelling:
# --seq-len (the production length), --fit-lens (the scaling list).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/out}
export PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore::FutureWarning
mkdir -p "$OUT"
if [ "${1:-}" = "--next" ]; then
  # The next device call (benchmarks/RESULTS.md, "The next GPU call"): what issues 26 and 27 still lack, within
  # 590 s of wall. `--next 26` or `--next 27` runs one issue's part alone (two calls, more search budget).
  # FLA_PATH: fla 0.6.0 with the #640 guard readable (benchmarks/fla_check.py says why), carried as .whl-fla,
  # used when no .gpu-site/site26.tar.xz was carried (see next26 below).
  # GPU_ALL_T0: when the device command began (before its installs), so the last timeouts end before 600 s
  which=${2:-all}; start=${GPU_ALL_T0:-$(date +%s)}; rc=0
  dry=${GPU_ALL_DRY:-}
  if [ -n "$dry" ]; then  # tiny stand-ins for the CPU: a two-layer Qwen3 (bench_stack_hours_gpu's), no compile
    export BENCH_QUICK=1
    tiny=$(python3 -c 'import sys; sys.path.insert(0, "benchmarks"); from pathlib import Path
from bench_stack_hours_gpu import tiny_checkpoint; print(tiny_checkpoint(Path(sys.argv[1])))' "$OUT")
    export BENCH_SHAPES="$tiny:2:128"
  fi
  FLA_PATH=${FLA_PATH:-../.whl-fla/0.6.0-no640guard}
  # GPU_ALL_LIMIT: the seconds the whole call may take (default 590 of the 600 a command gets; less where less
  # device time is left)
  left() { echo $(( ${GPU_ALL_LIMIT:-590} - ($(date +%s) - start) )); }
  # a timeout of at most $1 s within what is left less the 15 s of `timeout -k 15` (its KILL must land within the
  # call too), never 0 (GNU timeout 0 waits forever): 1 when none is left
  within() { local l n; l=$(( $(left) - 15 )); n=$(( $1 < l ? $1 : l )); echo $(( n > 1 ? n : 1 )); }
  # unpack an .xz archive with Python's tarfile: the image may have no xz for tar -J
  untar() { python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' "$@"; }
  # causal-conv1d built for sm_90 beforehand (.gpu-site/cc1d.tar.xz, 20.5 MiB: too much beside site26.tar.xz in
  # one call) rides with issue 27's call and stays on a warm machine, git-ignored, for issue 26's call after it
  if [ -f .gpu-site/cc1d.tar.xz ] && [ ! -d .gpu-cc1d/causal_conv1d ]; then
    mkdir -p .gpu-cc1d && untar .gpu-site/cc1d.tar.xz .gpu-cc1d
  fi
  # Issue 26 with what benchmarks/make_gpu_site.sh packed (carry .gpu-site/site26.tar.xz): Triton 3.7.1 first on
  # the path, so fla 0.6.0 runs as released (its #640 guard passes), and causal-conv1d for sm_90 (left in
  # .gpu-cc1d by the call before, else compiled here by benchmarks/build_causal_conv1d.sh; the shim if both fail).
  # If fla is wrong or fails under Triton 3.7.1, the same as next26_lifted with the archive's fla copies.
  next26() {
    local g=/tmp/g26 conv=--conv-shim
    rm -rf $g && mkdir -p $g && untar .gpu-site/site26.tar.xz $g || { rc=1; return; }
    # the archive has no ptxas: Triton 3.7.1 takes the image's Triton's (CUDA 12.8 in a wheel; fine for
    # sm_90), else the CUDA toolkit's on the PATH (nvcc 13.0's)
    local ptxas
    ptxas=$(python3 -c 'import os, triton
print(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "ptxas"))')
    [ -x "$ptxas" ] || ptxas=$(command -v ptxas)
    export TRITON_PTXAS_PATH=${TRITON_PTXAS_PATH:-$ptxas}
    echo "[gpu_all.sh --next: Triton 3.7.1 with ptxas $TRITON_PTXAS_PATH]"
    # a causal-conv1d that does not import makes transformers fall back to its torch conv silently: try it first
    cc1d_ok() { PYTHONPATH=$1 python3 -c 'import torch, causal_conv1d, causal_conv1d_cuda' >/dev/null 2>&1; }
    if [ -d .gpu-cc1d/causal_conv1d ] && cc1d_ok .gpu-cc1d; then  # left by this machine's previous call
      conv="--conv-path $PWD/.gpu-cc1d"
    elif [ "${CC1D_BUILD:-1}" = 1 ] && timeout -k 15 $(within 240) bash benchmarks/build_causal_conv1d.sh $g/causal_conv1d-1.7.0 $g/whl $g/cc1d && cc1d_ok $g/cc1d
    then
      conv="--conv-path $g/cc1d"
    fi
    echo "[gpu_all.sh --next: causal conv: $conv at $(( $(date +%s) - start )) s]"
    local convdir=${conv#--conv-path }; [ "$conv" = --conv-shim ] && convdir=benchmarks/conv_shim
    local caller=${PYTHONPATH#.} check=0
    # FLA_PRECHECK=0: no strict check first (bench_carriers_gpu's own fla_check part still records it)
    [ "${FLA_PRECHECK:-1}" = 1 ] && { PYTHONPATH=$g/tri371:$g/site:.:$g/fla060:$convdir$caller timeout -k 15 $(within 200) \
      python3 benchmarks/fla_check.py --out "$OUT/fla_triton371" --strict >/dev/null || check=$?; }
    if [ "$check" -eq 0 ]; then
      PYTHONPATH=$g/tri371:$g/site:.$caller timeout -k 15 $(within 330) python3 \
        benchmarks/bench_carriers_gpu.py --out "$OUT" --fla-path $g/fla060 $conv --skip moe hybrid_no_fla || rc=$?
    else  # 1: a wrong output or gradient, or a part failed (fla_triton371/fla_check.json); 124: it timed out
      echo "[gpu_all.sh --next: fla_check under Triton 3.7.1 exit $check: the lifted copies on the image's Triton]"
      PYTHONPATH=$g/site:.$caller FLA_PATH=$g/fla-no640guard FLA_ALSO=$g/fla-dsT CONV="$conv" next26_lifted
    fi
  }
  # Issue 26 on the image's Triton 3.6.0 (carry .whl and .whl-fla, installed to /tmp/site): fla 0.6.0 with the
  # #640 guard lifted, and a copy with the kernel rewritten (FLA_ALSO) checked, and timed if right.
  next26_lifted() {
    # FLA_ALSO: the #640 kernel rewritten (ds^T accumulated, no transposed MMA result): checked in ~40 s; timed
    # too when it checks right and the call is issue 26's alone
    timeout -k 15 $(within 300) python3 benchmarks/bench_carriers_gpu.py --out "$OUT" \
      --fla-path "$FLA_PATH" ${CONV:---conv-shim} --lift-fla-640 $([ -d "${FLA_ALSO:-}" ] && echo --fla-also "$FLA_ALSO") \
      $([ "$which" = 26 ] && echo --time-also) --skip moe hybrid_no_fla || rc=$?
  }
  # issue 27's bump (~1.5 min): the loss's waits (ce_sync against probe_like, whose loss no longer waits) and
  # the profiled timelines; the allocator, the collector, NVML and the clocks were ruled out on 2026-12-05
  spread_diag_27() {
    timeout -k 15 $(within 180) python3 benchmarks/spread_diag.py --out "$OUT" --no-expandable \
      --segments probe_like ce_sync no_sync profiled $([ -n "$dry" ] && echo --tiny --steps 6 --seq-len 128 || echo --steps 30)
    local rc_diag=$?; [ "$rc" -eq 0 ] && rc=$rc_diag
    echo "[gpu_all.sh --next: spread_diag exit $rc_diag at $(( $(date +%s) - start )) s]"
  }
  {
    nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu,clocks.sm --format=csv
    python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
    if [ "$which" = all ] || [ "$which" = 26 ]; then  # issue 26: fla checked, dense vs hybrid with fla + causal conv, packed varlen
      if [ -f .gpu-site/site26.tar.xz ]; then next26; else next26_lifted; fi
      echo "[gpu_all.sh --next: carriers exit $rc at $(( $(date +%s) - start )) s]"
    fi
    if [ "$which" = all ] || [ "$which" = 27 ]; then  # issue 27: the bump, then the 1.7B search
      spread_diag_27
      # the 1.7B search with fused-adamw as a third candidate, in whatever time is left (the search stops
      # within its budget and says what it did not try); 40 s kept for the last process and the summary
      # (SEARCH_17B=0: the diagnosis alone, when another part shares the call)
      budget=$(( $(left) - 40 ))
      if [ "${SEARCH_17B:-1}" = 0 ]; then
        echo "[gpu_all.sh --next: the 1.7B search left out (SEARCH_17B=0)]"
      elif [ "$budget" -gt 90 ]; then
        timeout -k 15 $(within $(( $(left) - 5 ))) python3 benchmarks/bench_stacks.py --out "$OUT" --shape 1.7b_4x4096 \
          --candidates bf16-adapters $([ -z "$dry" ] && echo compile) fused-adamw --budget-s "$budget" \
          --numerics-steps 5 || rc=$?
      else
        echo "[gpu_all.sh --next: no time left for the 1.7B search ($budget s)]"
      fi
    fi
    if [ "$which" = hours ]; then  # issue 27 item 6: the ruling's 4B voice priced with the stack, replayed
      # the stack --search found on the 4B at 1 x 4,096 (0.199 s against 0.410), measured beside the baseline at
      # the replay's BATCH x 2,048 (3: it fits an H100 and leaves time; the same on an H200, one setting for both
      # cards). PHASE=first: the carrier and the baseline's replay (~3.5 + 5 min on an H100); PHASE=rest: the
      # pricing and the stacked replays (~6 min), carrying .gpu-hours (call 1's stack_hours files) unless the
      # machine is still warm. PHASE=carrier and PHASE=baseline split the first call in two.
      stack=${STACK:-bf16-adapters+compile+fused-adamw}
      [ -n "$dry" ] && stack=${STACK:-bf16-adapters+fused-adamw}  # no compile on the CPU
      # Each file is written into $OUT as it is made (a call killed at its limit keeps what finished); a later
      # phase reads the earlier call's from .gpu-hours (carried, or left on a warm machine) and returns only its
      # own (a call returns at most 8 files). THEN_27=1 keeps 150 s for the bump's diagnosis after the hours.
      phase=${PHASE:-all} hours_out=$OUT/stack_hours reserve=0
      [ "${THEN_27:-0}" = 1 ] && reserve=150
      timeout -k 15 $(within $(( $(left) - 10 - reserve ))) python3 benchmarks/bench_stack_hours_gpu.py \
        --out "$hours_out" $([ "$phase" = rest ] || [ "$phase" = baseline ] && echo --from .gpu-hours) \
        --phase "$phase" $([ -n "$dry" ] && echo --tiny) --stack "$stack" --num-steps "${NUM_STEPS:-60}" \
        --batch-size "${BATCH:-3}" || rc=$?
      if [ "$phase" != rest ] && [ "$phase" != all ]; then  # for the next phase on this machine, if still warm
        mkdir -p .gpu-hours && cp "$hours_out"/*.json .gpu-hours/ 2>/dev/null
      fi
      [ "${THEN_27:-0}" = 1 ] && spread_diag_27
    fi
    echo "[gpu_all.sh --next: done, exit $rc after $(( $(date +%s) - start )) s]"
    exit $rc
  } 2>&1 | tee "$OUT/gpu_log.txt"
  exit "${PIPESTATUS[0]}"
fi
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
