#!/usr/bin/env bash
# call 29 (tenth session): the GEMV on wgmma (GemvMMA WG = 1) against mma.sync, side by side
# (tune_gemv: time, bits, batch invariance), ncu's view of both at kda_x batch 64; then call 27's
# check of the block-by-block combine (issue 34) and its step time on 3 ranks.
source "$(dirname "$0")/common.sh"
export END=${END:-570}
G="--U 2 --RTKS 1x4,2x4,4x1,4x2,4x4,8x1,8x2 --WG 0,1"
TAIL=30 cmd A_wg_kda_x 150 python3 -m megakernel.tools.tune_gemv --shapes kda_x --batches 1,8,64 $G --json $R/A.json
TAIL=60 cmd B_wg_more 170 python3 -m megakernel.tools.tune_gemv --shapes kda_out,mla_out,gemv_x,gemv_shared --batches 1,64 $G --json $R/B.json
D='{"NTT":8,"U":2,"RT":2,"KS":4,"MT":1,"PF":0}'; W='{"NTT":8,"U":2,"RT":4,"KS":4,"MT":1,"PF":0,"WG":1}'
TAIL=200 cmd C_ncu 110 ncu --kernel-name regex:GemvMMA --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section LaunchStats python3 scripts/gpu_calls/ncu_gemv.py kda_x 64 "$D"
TAIL=200 cmd C2_ncu_wg 80 ncu --kernel-name regex:GemvMMA --launch-skip 1 --launch-count 1 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats \
  --section SchedulerStats --section LaunchStats python3 scripts/gpu_calls/ncu_gemv.py kda_x 64 "$W"
export OMP_NUM_THREADS=8
TAIL=14 cmd D_ep_ipc 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_ep_gpu.py -k "ipc and not wrong_offset"
TAIL=20 cmd E_ep_time 90 python3 -m megakernel.tools.ep_time --ranks 3 --dims full --batches 8,64 --steps 5
finish
