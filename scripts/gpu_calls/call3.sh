#!/usr/bin/env bash
# call 3: moe+layer at the remaining seeds, two lanes only (call 2's OOMs came from the margins tool's
# 132 GiB beside four full-dims lanes), then the margins at full dims alone
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=6 END=470
( ci A_def_71002 280 -k "moe or layer" --k3diff-seed 71002; ci A_full_72002 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72002 ) &
( ci B_def_71003 280 -k "moe or layer" --k3diff-seed 71003; ci B_full_72003 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72003 ) &
wait
TAIL=60 cmd C_margins 200 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
finish
