#!/usr/bin/env bash
# call 6 (next session): the margins at full dims alone (every case from nothing held, 1e27401+),
# then the default-preset nightly in one process (two workers do not fit one H200: k3diff refuses it)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=70 cmd A_margins 240 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
PROFILE=nightly ci B_nightly_${SEED:-74003} $(left) --k3diff-seed ${SEED:-74003} -p no:randomly
finish
