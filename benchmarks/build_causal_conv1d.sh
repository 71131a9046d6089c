#!/usr/bin/env bash
# Compiles causal-conv1d from its sdist against the installed torch, for Hopper (sm_90) alone, and installs it
# into a folder to put on the path:  bash benchmarks/build_causal_conv1d.sh SDIST_DIR WHEEL_DIR TARGET_DIR
# What causal-conv1d needs (it has no wheel on the registry): nvcc of the CUDA major version torch was built
# with, torch's headers, ninja, setuptools and wheel. Its setup.py first downloads a prebuilt wheel from the
# project's GitHub releases (no network on the device image: CAUSAL_CONV1D_FORCE_BUILD skips that), then
# compiles three CUDA files for ten architectures; here the gencode list is cut to sm_90 so the build takes
# about a minute on 16 cores (all ten: several times that).
set -euo pipefail
src=$(realpath "$1") wheels=$(realpath -m "$2") target=$(realpath -m "$3")  # the build runs in a copy elsewhere
build=$(mktemp -d)
cp -r "$src"/. "$build"
python3 - "$build/setup.py" <<'EOF'
import sys
path = sys.argv[1]
text = open(path).read()
anchor = "    # HACK: The compiler flag -D_GLIBCXX_USE_CXX11_ABI"
assert anchor in text, "causal-conv1d's setup.py changed: the gencode list is no longer where expected"
only = '    if os.getenv("CAUSAL_CONV1D_ARCH"):\n        cc_flag = ["-gencode", os.environ["CAUSAL_CONV1D_ARCH"]]\n'
open(path, "w").write(text.replace(anchor, only + anchor, 1))
EOF
nvcc --version | tail -2
(cd "$build" && CAUSAL_CONV1D_FORCE_BUILD=TRUE CAUSAL_CONV1D_ARCH=arch=compute_90,code=sm_90 \
  MAX_JOBS=${MAX_JOBS:-16} NVCC_THREADS=${NVCC_THREADS:-4} \
  python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$wheels" .)
python3 -m pip install -q --no-index --no-deps --no-compile --target "$target" "$wheels"/causal_conv1d-*.whl
ls -l "$wheels"/causal_conv1d-*.whl
