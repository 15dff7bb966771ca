#!/usr/bin/env bash
# call 57 (thirteenth session): k_mla_attn_tma.py beside k_mla_attn_wg.py (early issue) and
# its old schedule, alone, the same bits required, at the bench grid and ragged small rows.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-150}
TAIL=16 cmd A_ksplit 120 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,2x3000,1x1024,1x8192,1x32768,8x1024,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma_late,wgmma,tma
finish
