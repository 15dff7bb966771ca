#!/usr/bin/env bash
# call 8 (fourth session): the whole check on this session's tree, issue 28: every stage's default
# ci at a fresh seed, the margins at full dims alone (every case from nothing held), the whole
# mutants run on cuda (false-alarm controls included), then the full preset with what is left
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
ci A_all_def_81001 260 --k3diff-seed 81001
TAIL=70 cmd B_margins 220 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
TAIL=60 cmd C_mutants 150 python3 -m k3diff.cli mutants --device cuda
ci D_all_full_82001 $(left) --k3diff-preset full --k3diff-seed 82001
finish
