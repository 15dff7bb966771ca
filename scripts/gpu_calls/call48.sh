#!/usr/bin/env bash
# call 48 (twelfth session): on this tree, gpu_check_mla.sh's planted bugs in the default (wgmma)
# attention and in the mma.sync one, hunted by `k3diff hunt` (not run on the wgmma default before).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
source scripts/lane.sh
OUT_SAVE=$OUT; OUT=$R
lane_planted mla k_mla_attn_wg.py 's/R1 = cutlass.min(R0 + W \* ch, n)/R1 = cutlass.min(R0 + W * ch, n) - 1/' A_mla_wg_planted
MK_MLA_MMA=sync lane_planted mla k_mla_attn_mma.py 's/end = cutlass.min(start + ch, n)/end = cutlass.min(start + ch, n) - 1/' B_mla_sync_planted
OUT=$OUT_SAVE
finish
