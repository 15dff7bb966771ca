#!/usr/bin/env bash
# call 2: moe+layer at the remaining seeds of both presets, margins at full dims, memcheck over the
# regression seeds, the EP mutant on cuda, and a full-preset nightly soak over the four stages
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=3
( ci A_def_71002 280 -k "moe or layer" --k3diff-seed 71002; ci A_full_72002 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72002 ) &
( ci B_def_71003 280 -k "moe or layer" --k3diff-seed 71003; ci B_full_72003 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72003 ) &
( TAIL=60 cmd C_margins 240 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
  for s in corpora/regressions/*.json; do
    TAIL=6 cmd "C_memcheck_$(basename $s .json)" 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m k3diff.cli replay "$s" --backend $MK --device cuda
  done ) &
( TAIL=8 cmd D_ep_mutant 150 python3 -m k3diff.cli mutants --device cuda --only ep_dispatch_off_by_one --controls none
  PROFILE=nightly ci E_soak_73001 $(left) -k "moe or layer" --k3diff-preset full --k3diff-seed 73001 -p no:randomly ) &
( PROFILE=nightly ci F_soak_73002 $(left) -k "mla or kda" --k3diff-preset full --k3diff-seed 73002 -p no:randomly ) &
wait
finish
