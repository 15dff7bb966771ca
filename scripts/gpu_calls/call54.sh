#!/usr/bin/env bash
# call 54 (thirteenth session): k_mla_attn_wg.py, one or two warpgroups per CTA (wgs) beside the
# load schedules, alone, the same bits required (mla_ksplit's SAME_BITS).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=14 cmd A_ksplit 240 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x2048,1x8192,1x16384,1x32768,2x8192,4x8192,8x1024,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma_late,wgmma,wgmma_1wg,wgmma_2wg
finish
