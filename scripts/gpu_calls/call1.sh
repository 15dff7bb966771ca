#!/usr/bin/env bash
# call 1: moe+layer at the remaining seeds of both presets, the megakernel's own GPU tests, margins
# at full dims, memcheck over the regression seeds, mutants on cuda
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=4
( ci A_def_71002 280 -k "moe or layer" --k3diff-seed 71002; ci A_full_72002 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72002 ) &
( ci B_def_71003 280 -k "moe or layer" --k3diff-seed 71003; ci B_full_72003 280 -k "moe or layer" --k3diff-preset full --k3diff-seed 72003 ) &
( cmd C_mktests 240 python3 -m pytest -q tests/megakernel -p no:cacheprovider -x
  TAIL=60 cmd C_margins 200 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
  for s in corpora/regressions/*.json; do
    TAIL=6 cmd "C_memcheck_$(basename $s .json)" 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m k3diff.cli replay "$s" --backend $MK --device cuda
  done ) &
( TAIL=60 cmd D_mutants 400 python3 -m k3diff.cli mutants --device cuda ) &
wait
finish
