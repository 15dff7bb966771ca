#!/usr/bin/env bash
# Packs what scripts/gpu_adapters.sh installs on the offline GPU machine (CPython 3.12, x86-64,
# torch 2.11 + CUDA 13, Triton 3.6 already there) into the git-ignored folder .whl/ (~24 MB):
#   fla_core-0.6.0-py3-none-any.whl                  flash-linear-attention's kernels (pure Python + Triton)
#   apache_tvm_ffi-0.1.15.post2-cp312-...whl         FlashInfer's FFI (its one dependency missing there)
#   flashinfer-0.7.4-mla.tar.xz                      flashinfer-python 0.7.4's wheel contents, unpacked
#       into site-packages form; its data/csrc keeps only the top-level sources (the MLA JIT module
#       needs batch_mla_*.cu, the config template and tvm_ffi_utils.h; the subfolders are other
#       kernels' sources, ~385 MB), so the archive is ~20 MB instead of a 101 MB wheel.
# The other Requires-Dist of flashinfer-python (cuda-python, cuda-tile, nccl4py, nccl-extensions,
# nvidia-cudnn-frontend, nvidia-cutlass-dsl) are not packed: `import flashinfer` and its FA2 MLA path
# do not import them (checked with `import flashinfer.mla` on a CPU). Run from the project root.
set -euo pipefail
FLA=${FLA_VERSION:-0.6.0}
FI=${FLASHINFER_VERSION:-0.7.4}
TVMFFI=${TVM_FFI_VERSION:-0.1.15.post2}
root=$(git rev-parse --show-toplevel)
cd "$root"
mkdir -p .whl
python3 -m pip download -q --no-deps -d .whl "fla-core==$FLA"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
  -d .whl "apache-tvm-ffi==$TVMFFI"
if [[ ! -s .whl/flashinfer-$FI-mla.tar.xz ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps -d "$tmp" "flashinfer-python==$FI"
  mkdir -p "$tmp/site"
  python3 -m zipfile -e "$tmp"/flashinfer_python-"$FI"-*.whl "$tmp/site"
  find "$tmp/site/flashinfer/data/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  rm -f "$tmp"/site/flashinfer_python-*.dist-info/RECORD
  tar -C "$tmp/site" -cf - flashinfer "flashinfer_python-$FI.dist-info" | xz -6 -T2 > ".whl/flashinfer-$FI-mla.tar.xz.part"
  mv ".whl/flashinfer-$FI-mla.tar.xz.part" ".whl/flashinfer-$FI-mla.tar.xz"
fi
ls -la .whl
du -ch .whl/* | tail -1
