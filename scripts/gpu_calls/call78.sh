#!/usr/bin/env bash
# call 78 (nineteenth session): where the MXFP4 experts' time goes (issue 31, MXFP4 85% missed).
# Call 77 profiled the down kernel at T = 8 (memory-bound: 67% of its stall samples on its weight
# loads, DRAM at 80% of peak); this one the up kernel beside it, at T = 8 and 1 (ncu's warp states,
# source counters and per-SASS stall samples of one warm launch each, full dims). sass_stalls.py
# reads the exported .sass.csv on the CPU afterwards.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
ncu_experts 8 up down
ncu_experts 1 up down
finish
