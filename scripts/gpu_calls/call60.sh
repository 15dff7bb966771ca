#!/usr/bin/env bash
# call 60 (thirteenth session): k_mla_attn_tma.py with desync (no CTA barrier per tile: empty
# mbarriers per buffer) beside the default, alone, the same bits required.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-100}
TAIL=16 cmd A_ksplit 80 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,2x3000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma_sync,tma   # tma: desync, the default since call 64
finish
