#!/usr/bin/env bash
# What a GPU call carries besides the tree, rebuilt on the CPU machine (all git-ignored):
#   .device/  CuTe DSL for the GPU machine (~55 MB):   bash ../shared/device/cutedsl-bundle
#   .mkcache/mkc.tar.xz  the megakernel's kernels compiled here for sm_90a at the full and small
#             dims (~1 min, 0.3 MB; CuTe DSL 4.8.1 installed here by '.[dev]'); lab/gpu/lib.sh
#             unpacks it into $MEGAKERNEL_CACHE, and a file that does not load there is compiled again
#   .gpa/     the adapters' packages (~24 MB): fla-core + flash-linear-attention 0.6.0, einops,
#             apache-tvm-ffi 0.1.15.post2 (cp312), flashinfer-python 0.7.4 trimmed to its
#             top-level csrc (its MLA JIT sources) as a tar.xz. Carried WITHOUT .device (64 MiB).
# From the project root.
set -euo pipefail
mkdir -p .gpa/whl .gpa/fi
grep -qxF '/.gpa/' .git/info/exclude 2>/dev/null || echo '/.gpa/' >> .git/info/exclude
py312="--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64"
python3 -m pip download -q --no-deps -d .gpa/whl fla-core==0.6.0 flash-linear-attention==0.6.0 einops
python3 -m pip download -q --no-deps $py312 -d .gpa/fi apache-tvm-ffi==0.1.15.post2
if [ ! -s .gpa/fi/flashinfer-0.7.4-mla.tar.xz ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download -q --no-deps -d "$tmp" flashinfer-python==0.7.4
  python3 -m zipfile -e "$tmp"/flashinfer_python-0.7.4-*.whl "$tmp/site"
  find "$tmp/site/flashinfer/data/csrc" -mindepth 1 -maxdepth 1 -type d -exec rm -rf {} +
  rm -f "$tmp"/site/flashinfer_python-*.dist-info/RECORD
  tar -C "$tmp/site" -cf - flashinfer flashinfer_python-0.7.4.dist-info | xz -6 -T4 > .gpa/fi/flashinfer-0.7.4-mla.tar.xz
fi
if [ ! -s .mkcache/mkc.tar.xz ]; then
  tmpc=$(mktemp -d)
  MEGAKERNEL_CACHE=$tmpc python3 -m megakernel compile --arch sm_90a --dims full,small | tail -1
  mkdir -p .mkcache && tar -C "$tmpc" -cJf .mkcache/mkc.tar.xz . && rm -rf "$tmpc"
fi
du -sh .gpa .mkcache
