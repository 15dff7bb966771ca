#!/usr/bin/env bash
# call 64 (fourteenth session): the TMA attention's variants alone, among them body_split (each
# warpgroup scores half the tile, P exchanged through shared memory: other l sums, so its own
# bits, held to float64); desync, the CTA barrier per tile and the overlap the same bits as
# wgmma. Then the split under memcheck and racecheck on small rows.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-240}
TAIL=16 cmd A_ksplit 80 python3 -m megakernel.tools.mla_ksplit --rows 2x3000,3x1000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma_sync,tma,tma_ovl,tma_split
TAIL=8 cmd B_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,tma_split
TAIL=12 cmd C_racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 2x300 --variants unsplit,tma_split
finish
