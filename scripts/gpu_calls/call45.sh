#!/usr/bin/env bash
# call 45 (twelfth session): the tensor-core GEMVs at batch 1 and 8, their own K split only (the
# bits), every unroll / row tiles / double buffering tried (none changes a bit), against the
# CUDA-core GEMV in the same run. Kernels precompiled on the CPU (tune_gemv --compile-only).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-400}
TAIL=200 cmd A_tune_b1 $(left) python3 -m megakernel.tools.tune_gemv --batches 1,8 --own-ks --U 1,2,4,8 \
  --RTKS 1x2,2x2,4x2,8x2,1x4,2x4,4x4,1x8,2x8 --MT 1 --PF 0 --PIPE 0,1 --json $R/tune_b1.json
finish
