#!/usr/bin/env bash
# call 30 (tenth session): every GEMV shape at batch 16, 32 and 64 on its own K split, mma.sync and
# wgmma variants side by side (call 29: wgmma gave mma.sync's bits and was faster at 64 on five shapes)
source "$(dirname "$0")/common.sh"
export END=${END:-570}
TAIL=120 cmd A_own_ks 540 python3 -m megakernel.tools.tune_gemv --own-ks --batches 16,32,64 --U 2 --MT 1 \
  --RTKS 1x2,2x2,4x2,1x4,2x4,4x4 --WG 0,1 \
  --shapes gemv_x,gemv_shared,out_shared,out_routed,kda_x,kda_fb,kda_out,mla_x,mla_qb,mla_out --json $R/A.json
finish
