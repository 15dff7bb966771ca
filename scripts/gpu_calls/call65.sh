#!/usr/bin/env bash
# call 65 (fourteenth session): call 64 again after its fix (body_split had taken desync's
# default, so its loads waited on mbarriers it never made: a hang past two tiles a walk, which
# call 64's single-tile racecheck rows could not reach). The split first and alone, then the
# variants side by side, then memcheck and racecheck over walks of many tiles.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=8 cmd A_split 40 python3 -m megakernel.tools.mla_ksplit --rows 2x3000,1x8192 --variants unsplit,tma_split
TAIL=16 cmd B_ksplit 90 python3 -m megakernel.tools.mla_ksplit --rows 2x3000,3x1000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma_sync,tma,tma_ovl,tma_split
TAIL=8 cmd C_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,tma_split
TAIL=8 cmd D_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 1x3000,1x700 --variants unsplit,tma_split
finish
