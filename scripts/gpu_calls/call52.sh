#!/usr/bin/env bash
# call 52 (thirteenth session), 560fbf4's kernels: where k_mla_attn_wg.py's time goes per tile.
# ncu with the stall sampling per SASS instruction at 1 / 8k (32 CTAs) and 64 / 32k, exported as
# CSV (ncu --page source) for the analysis on the CPU.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-400}
mkdir -p $OUT/ncu
for shape in "1 8192" "64 32768"; do
  set -- $shape; n=ncu_${1}_${2}
  TAIL=80 cmd $n 150 ncu --kernel-name regex:mla_attn_wg --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats --section SourceCounters --section InstructionStats --section MemoryWorkloadAnalysis \
    --import-source no -o $OUT/ncu/$n python3 scripts/gpu_calls/ncu_attn.py $1 $2 wgmma
  [ -f $OUT/ncu/$n.ncu-rep ] && ncu --import $OUT/ncu/$n.ncu-rep --page source --csv --print-source sass \
    > $OUT/ncu/$n.sass.csv 2> $OUT/ncu/$n.err
done
finish
