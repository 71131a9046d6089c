#!/usr/bin/env bash
# Builds .gpu-site/site26.tar.xz: what issue 26's device call needs beside the H200 image, in one archive under
# the 64 MiB a call carries (the image has torch 2.11 + Triton 3.6.0, nvcc 13.0, no registry).
#   tri371/   Triton 3.7.1, slimmed: Triton 3.6.0 miscompiles fla's gated backward kernel on Hopper (fla #640),
#             fla 0.5.1+ refuses to run below 3.7.1, and the 3.7.1 wheel is 188.6 MiB. Kept: everything the
#             compiler needs, libtriton.so stripped of debug info (440 -> 172 MiB; 34 MiB in xz). Left out:
#             ptxas (the call points TRITON_PTXAS_PATH at the image's own, Triton 3.6.0's CUDA 12.8 one),
#             ptxas-blackwell, nvdisasm, CUPTI and the proton profiler's libraries, test plugins.
#   site/     the wheels in .whl (transformers 5.25 and its needs, peft, pydantic), unpacked, without hf-xet,
#             kernels, liger-kernel and fla (none needed by issue 26's parts).
#   fla060/   fla-core + flash-linear-attention 0.6.0 as released.
#   fla-no640guard/  fla 0.6.0 with its #640 guard readable (the fallback if Triton 3.7.1 cannot load); fla-dsT/
#             the rewritten kernel, only where .whl-fla/0.6.0-dsT was kept.
#   causal_conv1d-1.7.0/  the sdist (no wheel on the registry; the call compiles it with the image's nvcc).
# Needs: .whl (benchmarks/make_gpu_wheels.sh), pip, strip, xz. About 4 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/g/site" "$work/g/fla060" .gpu-site
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 -d "$work/dl" triton==3.7.1
python3 -m zipfile -e "$work"/dl/triton-3.7.1-*.whl "$work/g/tri371"
tri="$work/g/tri371/triton"
strip --strip-unneeded "$tri/_C/libtriton.so" "$tri/_C/libproton.so"
rm -rf "$tri/backends/nvidia/bin/ptxas" "$tri/backends/nvidia/bin/ptxas-blackwell" "$tri/backends/nvidia/bin/nvdisasm" \
  "$tri/backends/nvidia/lib/cupti" "$tri/plugins" "$tri/instrumentation/libGPUInstrumentationTestLib.so" "$tri/FileCheck"
chmod +x "$tri"/backends/nvidia/bin/* "$tri"/_C/*.so
for wheel in .whl/*.whl; do
  case $(basename "$wheel") in
    hf_xet-* | kernels-* | liger_kernel-*) ;;
    fla_core-* | flash_linear_attention-*) python3 -m zipfile -e "$wheel" "$work/g/fla060" ;;
    *) python3 -m zipfile -e "$wheel" "$work/g/site" ;;
  esac
done
# The fallback copy: fla 0.6.0 whose #640 guard also reads LABPROBE_LIFT_FLA_640 (one `if`, made here from the
# wheels so nothing but .whl is needed); the hand-rewritten dsT kernel rides along only where it was kept.
cp -r "$work/g/fla060" "$work/g/fla-no640guard"
python3 - "$work/g/fla-no640guard/fla/ops/common/chunk_o.py" <<'EOF2'
import sys
path = sys.argv[1]
text = open(path).read()
guard = "if g is not None and IS_NVIDIA_HOPPER and TRITON_ABOVE_3_4_0 and not TRITON_ABOVE_3_7_1:"
lifted = guard[:-1] + ' and not __import__("os").environ.get("LABPROBE_LIFT_FLA_640"):'
assert text.count(guard) == 1, "fla 0.6.0's #640 guard not found where expected"
open(path, "w").write(text.replace(guard, lifted))
EOF2
[ -d .whl-fla/0.6.0-dsT ] && cp -r .whl-fla/0.6.0-dsT "$work/g/fla-dsT"
python3 - "$work/g" <<'EOF'
import io, re, sys, tarfile, urllib.request
page = urllib.request.urlopen("https://pypi.org/simple/causal-conv1d/").read().decode()
url = re.search(r'href="([^"#]+causal_conv1d-1\.7\.0\.tar\.gz)', page).group(1)
tarfile.open(fileobj=io.BytesIO(urllib.request.urlopen(url).read())).extractall(sys.argv[1], filter="data")
EOF
find "$work/g" -name __pycache__ -prune -exec rm -rf {} +
tar -C "$work/g" -cf - . | xz -9e -T2 >.gpu-site/site26.tar.xz
ls -l .gpu-site/site26.tar.xz
