#!/usr/bin/env bash
# call 22 (ninth session): MLA attention, the same products scheduled differently (a deeper
# cp.async ring, CTAs walking several splits, the query in registers), timed alone and held to
# the default's bits (tools/mla_ksplit.py); ncu's view of the default at 64 x 32k.
# Ran on the tree of f15afdb (the variants were deleted after it: none was faster).
source "$(dirname "$0")/common.sh"
export END=${END:-560}
TAIL=14 cmd A_ksplit 300 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,8x32768,64x1024,64x32768 \
  --variants unsplit,ksplit+mtc2,stages3,stages4,walk,walk+stages3,qreg
TAIL=120 cmd B_ncu 200 ncu --kernel-name regex:mla_attn_mma --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
  --section LaunchStats python3 scripts/gpu_calls/ncu_attn.py 64 32768 ksplit+mtc2
finish
