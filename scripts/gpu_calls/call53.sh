#!/usr/bin/env bash
# call 53 (thirteenth session): k_mla_attn_wg.py's load schedules side by side (the same bits
# required): the old one (wgmma_late), the early issue alone (wgmma_early), early + the cheap
# whole-tile issue (wgmma, the new default); then ncu's stall view of the new one at 1 / 8k.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-400}
TAIL=14 cmd A_ksplit 200 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma_late,wgmma_early,wgmma
mkdir -p $OUT/ncu
TAIL=4 cmd B_ncu 120 ncu --kernel-name regex:mla_attn_wg --launch-skip 1 --launch-count 1 --section WarpStateStats \
  --section SourceCounters --import-source no -o $OUT/ncu/new_1_8192 python3 scripts/gpu_calls/ncu_attn.py 1 8192 wgmma
[ -f $OUT/ncu/new_1_8192.ncu-rep ] && ncu --import $OUT/ncu/new_1_8192.ncu-rep --page source --csv --print-source sass > $OUT/ncu/new_1_8192.sass.csv
rm -f $OUT/ncu/*.ncu-rep
finish
