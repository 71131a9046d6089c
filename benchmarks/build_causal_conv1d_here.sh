#!/usr/bin/env bash
# Builds causal-conv1d 1.7.0 for the H200 image (Python 3.12, torch 2.11.0+cu130, sm_90) on a machine with no GPU
# and no CUDA install, from PyPI alone, and packs it as .gpu-site/cc1d.tar.xz (an unpacked wheel, .so stripped).
# PyPI's torch 2.11.0 cp312 x86_64 wheel is the CUDA 13.0 build; nvcc 13.0.88 comes as NVIDIA's wheels (crt and
# nvvm pinned to it: unpinned they resolve to 13.5); CUDA_HOME is a folder of links over them. About 4.5 minutes
# of compiling on 2 cores and 5 GB of disk, removed at the end. Needs python3.12 on the PATH (or PYTHON312).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd) work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"${PYTHON312:-python3.12}" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip install -q)
"${pip[@]}" torch==2.11.0 setuptools wheel ninja packaging
"${pip[@]}" nvidia-cuda-nvcc==13.0.88 nvidia-cuda-crt==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-cccl==13.0.85
cu13=$("$work/venv/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
mkdir -p "$work/cuda/lib64"
for d in bin include nvvm; do ln -s "$cu13/$d" "$work/cuda/$d"; done
for f in "$cu13"/lib/*; do ln -s "$f" "$work/cuda/lib64/"; done
ln -sf libcudart.so.13 "$work/cuda/lib64/libcudart.so"
python3 -c "import urllib.request as u, re, io, tarfile, sys
page = u.urlopen('https://pypi.org/simple/causal-conv1d/').read().decode()
url = re.search(r'href=\"([^\"#]+causal_conv1d-1\.7\.0\.tar\.gz)', page).group(1)
tarfile.open(fileobj=io.BytesIO(u.urlopen(url).read())).extractall(sys.argv[1], filter='data')" "$work"
PATH="$work/venv/bin:$work/cuda/bin:$PATH" CUDA_HOME="$work/cuda" TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=2 \
  bash benchmarks/build_causal_conv1d.sh "$work/causal_conv1d-1.7.0" "$work/dist" "$work/pkg"
PYTHONPATH="$work/pkg" "$work/venv/bin/python" -c "import torch, causal_conv1d, causal_conv1d_cuda
print('imports with torch', torch.__version__, 'from', causal_conv1d.__file__)" \
  || { echo "the build does not import"; exit 1; }
strip --strip-unneeded "$work"/pkg/causal_conv1d_cuda*.so
mkdir -p .gpu-site && tar -C "$work/pkg" -cf - . | xz -9e -T2 >"$root/.gpu-site/cc1d.tar.xz"
ls -l .gpu-site/cc1d.tar.xz
