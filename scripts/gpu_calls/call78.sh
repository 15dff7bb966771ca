#!/usr/bin/env bash
# call 78 (nineteenth session): where the MXFP4 experts' time goes (issue 31, MXFP4 85% missed).
# Call 76 found the rot layout's quarter fewer decode instructions buy no bandwidth (up 1-4% faster,
# down 6-10% slower). ncu's warp states, source counters and per-SASS stall samples of one warm
# launch each, T = 8, full dims: up and down, stored layout and rot. sass_stalls.py reads the
# exported .sass.csv on the CPU afterwards.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
mkdir -p $OUT/ncu
for r in up_ocp down_ocp down_rot up_rot; do
  n=ncu_$r
  TAIL=30 cmd B_$n 70 ncu --nvtx --nvtx-include "$r/" --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis \
    -o $OUT/ncu/$n python3 scripts/gpu_calls/ncu_experts.py 8 ${r#*_}
  [ -f $OUT/ncu/$n.ncu-rep ] && { ncu --import $OUT/ncu/$n.ncu-rep --page details --csv > $OUT/ncu/$n.details.csv 2>&1;
    ncu --import $OUT/ncu/$n.ncu-rep --page source --csv --print-source sass > $OUT/ncu/$n.sass.csv 2>&1; rm -f $OUT/ncu/$n.ncu-rep; }
done
finish
