#!/usr/bin/env bash
# call 55 (thirteenth session): k_mla_attn_tma.py (tiles by TMA) beside k_mla_attn_wg.py, alone,
# the same bits required; then memcheck over both at two small rows.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=14 cmd A_ksplit 150 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x8192,1x32768,8x1024,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma
TAIL=10 cmd B_memcheck 120 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,wgmma,tma
finish
