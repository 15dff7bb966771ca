#!/usr/bin/env bash
# call 12 (sixth session): issue 28's margins at full dims on the kernels of 720b777 / 6bcc3cc (MLA's
# ksplit attention the default since the last margins run), then nightly shards of seed 94001
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=70 cmd B_margins 230 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
nightly_shards 94001 8 ${SHARDS:-1 2 3 4 5 6 7 8}
finish
