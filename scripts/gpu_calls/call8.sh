#!/usr/bin/env bash
# call 8 (fourth session): the whole check on this session's tree, issue 28: every stage's default
# ci at a fresh seed, the margins at full dims alone (every case from nothing held), the whole
# mutants run on cuda (false-alarm controls included), issue 31's ksplit MLA attention measured
# (tools/mla_ksplit.py: time and error against float64), then the full preset with what is left
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
ci A_all_def_81001 260 --k3diff-seed 81001
TAIL=70 cmd B_margins 220 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
TAIL=60 cmd C_mutants 150 python3 -m k3diff.cli mutants --device cuda
TAIL=20 cmd D_mla_ksplit 100 python3 -m megakernel.tools.mla_ksplit
ci E_all_full_82001 $(left) --k3diff-preset full --k3diff-seed 82001
finish
