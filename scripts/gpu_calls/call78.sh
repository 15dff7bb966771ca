#!/usr/bin/env bash
# call 78 (nineteenth session): where the MXFP4 experts' time goes (issue 31, MXFP4 85% missed).
# Call 76 found the rot layout's quarter fewer decode instructions buy no bandwidth (up 1-4% faster,
# down 6-10% slower). ncu's warp states, source counters and per-SASS stall samples of one warm
# launch each, T = 8, full dims: up and down, stored layout and rot. sass_stalls.py reads the
# exported .sass.csv on the CPU afterwards.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
ncu_experts 8 up_ocp down_ocp down_rot up_rot
finish
