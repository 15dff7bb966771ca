#!/usr/bin/env bash
# call 4: the last moe+layer seed of the full preset, the margins at full dims alone, then the
# default-preset nightly as two xdist workers sharing the GPU (each given half of it)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
ci D_full_72003 150 -k "moe or layer" --k3diff-preset full --k3diff-seed 72003
TAIL=70 cmd E_margins 240 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
OMP_NUM_THREADS=6 PROFILE=nightly ci F_nightly_74001 $(left) --k3diff-seed 74001 -n 2 -p no:randomly
finish
