#!/usr/bin/env bash
# call 73 (seventeenth session), right after call 72 (whose A and C asked mla_ksplit without its
# base `unsplit` and were refused): the new default attention's bits against wgmma and the held
# kernel, and memcheck and racecheck over it.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=12 cmd A_ksplit 60 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,2x3000,1x1024,8x8192,64x8192,64x32768 \
  --variants unsplit,wgmma,tma,tma_held
TAIL=6 cmd C_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,tma
TAIL=6 cmd D_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 1x3000 --variants unsplit,tma
finish
