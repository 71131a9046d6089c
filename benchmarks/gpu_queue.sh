#!/usr/bin/env bash
# Issue 37 on the device machine (one H100/H200, no Ray or deltalake on its image): the GPU queue through the
# embedded Ray onto the real GPU, within 540 s.
#   1. `labprobe sweep` of profile + carrier (tiny, fast configs of Qwen3-0.6B's architecture, random weights)
#      on host `local` with `gpus: 1`: both must be stored ok, the no-CUDA guard must not misfire, and each
#      row must record the card (env gpu_index, gpu_uuid, gpu, driver, cuda, torch, gpu_wait_s). Printed.
#   2. A foreign process holding the card (a torch matmul loop in a background python, ~8 GiB, 100%), then the
#      same sweep into a second store with --gpu-wait-s 30: the GPU jobs must be skipped naming its pid, within
#      the wait (printed: each reason, the sweep's wall).
# Carry what /work/shared/tools/device-bundle.sh builds (Ray stripped and xz'd, deltalake xz'd, small wheels):
#   bash /work/shared/tools/device-bundle.sh .gpu-queue      (here, ~5 minutes; .gpu-queue is git-ignored)
#   run(command="bash benchmarks/gpu_queue.sh", carry=[".gpu-queue"], timeout_s=600)
# Files land in $OUT (the call's folder; benchmarks/results/gpu-queue by hand) as they are made.
set -uo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
LIMIT=${GPU_QUEUE_LIMIT:-540}
OUT=${OUT:-benchmarks/results/gpu-queue}
mkdir -p "$OUT"
left() { echo $((LIMIT - ($(date +%s) - t0))); }
# a timeout of at most $1 s within what is left (less the 10 s of `timeout -k 10`), never 0 (0 waits forever)
within() { local l n; l=$(($(left) - 10)); n=$(($1 < l ? $1 : l)); echo $((n > 1 ? n : 1)); }
say() { echo "[gpu_queue $(($(date +%s) - t0))s] $*" | tee -a "$OUT/log.txt"; }

# -- the site: Ray and deltalake unpacked, the small wheels installed, all first on PYTHONPATH -------------------
site=/tmp/lp-site
bundle=.gpu-queue
if [ ! -f "$site/.ready" ]; then
  rm -rf "$site" && mkdir -p "$site"
  for archive in "$bundle/ray.tar.xz" "$bundle/deltalake.tar.xz"; do
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2], filter="data")' \
      "$archive" "$site" || { say "cannot unpack $archive (was $bundle carried?)"; exit 2; }
  done
  python3 -m pip install -q --no-index --no-deps --target "$site" "$bundle"/whl/*.whl || { say "pip failed"; exit 2; }
  chmod +x "$site"/ray/core/src/ray/gcs/gcs_server "$site"/ray/core/src/ray/raylet/raylet 2>/dev/null
  touch "$site/.ready"
fi
export PYTHONPATH=.:$site PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error PYTHONWARNINGS=ignore
export RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 RAY_USAGE_STATS_ENABLED=0 PATH=$site/bin:$PATH
say "site ready"
nvidia-smi --query-gpu=index,uuid,name,driver_version,memory.used,utilization.gpu --format=csv | tee -a "$OUT/log.txt"
python3 - <<'EOF' 2>&1 | tee -a "$OUT/log.txt"
import importlib
for name in ("ray", "deltalake", "torch", "transformers", "peft", "pandas", "pyarrow", "yaml", "tqdm", "pynvml"):
    try:
        print(name, getattr(importlib.import_module(name), "__version__", "?"))
    except Exception as exc:
        print(name, "MISSING:", type(exc).__name__, exc)
import torch
print("cuda available", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")
print("torch uuid of cuda:0", torch.cuda.get_device_properties(0).uuid if torch.cuda.is_available() else "")
EOF

# -- the lab: host `local` (the embedded Ray's node) with its one GPU ----------------------------------------
lab=$OUT/lab
mkdir -p "$lab"
python3 - "$lab" "$PWD/demo" <<'EOF'
import sys
from pathlib import Path
import yaml
lab, demo = Path(sys.argv[1]), sys.argv[2]
fast = {"seq_lens": [512, 1024, 2048], "seq_len": 1024, "warmup_steps": 2, "steps": 5, "max_steps": 8,
        "profile_steps": 2, "processes": 1}
data = {
    "store": {"root": "store"},
    "hosts": [{"name": "local", "address": "127.0.0.1", "gpus": 1, "checkpoints_root": f"{demo}/checkpoints",
               "corpora_root": demo}],
    "checkpoints": [{"name": "qwen3-0.6b-base", "path": "qwen3-0.6b-base", "weights": "random"}],
    "plans": {"gpuq": [
        {"probe": "profile", "hosts": ["local"], "checkpoints": ["qwen3-0.6b-base"], "config": fast},
        {"probe": "carrier", "hosts": ["local"], "checkpoints": ["qwen3-0.6b-base"],
         "config": {"seq_len": 1024, "warmup_steps": 2, "steps": 5, "max_steps": 8, "processes": 1,
                    "numerics_steps": 0}},
    ]},
}
(lab / "cluster.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
EOF

rows() {  # the stored job rows: status, wall, reason, and the card each GPU job recorded
  python3 - "$1" <<'EOF' 2>&1 | tee -a "$OUT/log.txt"
import json, sys
from runner.store.store import Store
keys = ("gpu_index", "gpu_uuid", "gpu", "driver", "cuda", "torch", "gpu_assigned", "gpu_wait_s", "gpu_wait_reason")
for row in Store(sys.argv[1]).jobs().to_dict("records"):
    env = json.loads(row["env_json"])
    print(f"{row['probe']:8} {row['status']:8} wall {row['wall_s']:.1f} s  reason: {row['reason'][:300]}")
    print("   card:", {k: env.get(k) for k in keys})
EOF
}

sweep() {  # $1 store, $2 timeout; the sweep's JSON and its stderr into $OUT
  local s=$(date +%s)
  timeout -k 10 "$2" python3 -m runner.cli sweep --cluster "$lab/cluster.yaml" --plan gpuq --store "$1" \
    --gpu-wait-s 30 --timeout-s 400 --json >"$OUT/$(basename "$1").json" 2>"$OUT/$(basename "$1").err"
  local rc=$?
  say "sweep into $1: exit $rc in $(($(date +%s) - s)) s"
  tail -n 5 "$OUT/$(basename "$1").err" | tee -a "$OUT/log.txt"
  python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(json.dumps({k: d[k] for k in ("counts", "gpu_waits")}, indent=1))' \
    "$OUT/$(basename "$1").json" 2>&1 | tee -a "$OUT/log.txt"
}

# -- 1. the GPU idle: profile + carrier stored ok, the card recorded ------------------------------------------
say "phase 1: profile + carrier onto the idle GPU"
sweep "$OUT/store-idle" "$(within 330)"
rows "$OUT/store-idle"

# -- 2. a foreign process holds the card: the GPU jobs skipped naming it within --gpu-wait-s 30 ----------------
say "phase 2: a foreign matmul loop on the card"
python3 - >"$OUT/holder.log" 2>&1 <<'EOF' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
hold = torch.empty(8 * 1024**3 // 2, device="cuda", dtype=torch.bfloat16)  # ~8 GiB held
print("holding", flush=True)
end = time.time() + 400
while time.time() < end:
    a = (a @ a).clamp_(-1, 1)
torch.cuda.synchronize()
EOF
holder=$!
for _ in $(seq 60); do grep -q holding "$OUT/holder.log" && break; sleep 1; done
say "foreign pid $holder"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | tee -a "$OUT/log.txt"
sweep "$OUT/store-busy" "$(within 150)"
rows "$OUT/store-busy"
kill "$holder" 2>/dev/null
wait "$holder" 2>/dev/null
say "done"
