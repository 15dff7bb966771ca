#!/usr/bin/env bash
# call 79 (twentieth session): bytes in flight for the MXFP4 experts (issue 31, MXFP4 85% missed).
# Call 77's ncu put the down kernel at T = 8 on its weight loads (67% of stall samples, DRAM 80%);
# on the H100 the down kernel at T = 64 read at 59% of read bandwidth beside up's 91% (call 76).
# tune_mma now times up and down variants apart at T = 1, 8, 64, with variants holding more bytes
# in flight per warp (U 3-4, rings of 6-8 stages, two row tiles a warp, 8 warps a CTA), all
# compared bitwise with the default; then the step (fork-join) beside them, and ncu over down at
# T = 64 and up at T = 8. Before it: bash scripts/gpu_calls/build_cache.sh (the variants are in
# cache_extra.py) and ../shared/device/cutedsl-bundle; carry [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=60 cmd A_tune_mma 200 python3 -m megakernel.tools.tune_mma --T 1,8,64
TAIL=8 cmd B_bench_mxfp4 120 python3 -m megakernel bench --configs full --formats mxfp4 --no-compile
ncu_experts 64 down
ncu_experts 8 up
finish
