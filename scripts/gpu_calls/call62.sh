#!/usr/bin/env bash
# call 62 (fourteenth session): the tensor-core path's merge (lat only) by 16-byte loads against
# the default, side by side on the step's own partials, bits compared (tune_attn --lat-merges);
# then where the TMA attention's time goes at 64 / 32k (ncu's warp states, desync and not).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=16 cmd A_lat_merge 150 python3 -m megakernel.tools.tune_attn --splits 4 --hgs '' --batches '' --merges '' \
  --lat-merges v32x8,v64x8,v128x4,v128x8   # ran with q4 first: the old merge, gone since
for v in tma_sync tma; do   # the names as they are now (tma: desync, the default since call 64)
  TAIL=90 cmd B_ncu_$v 70 ncu --kernel-name regex:mla_attn_tma --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
    python3 scripts/gpu_calls/ncu_attn.py 64 32768 $v
done
finish
