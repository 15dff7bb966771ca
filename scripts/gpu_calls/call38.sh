#!/usr/bin/env bash
# call 38 (eleventh session): k_mla_attn_wg.py with each CTA walking consecutive splits: alone
# against mma.sync and float64, its GPU tests, ci's MLA cases at full dims and the step bench, all
# with MK_MLA_MMA=wg; then ncu's view of it at 64 x 32k.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=12 cmd A_ksplit 120 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x32768,8x32768,64x1024,64x32768 --variants unsplit,ksplit+mtc2,wgmma
if grep -q "within its error bound: ok" $R/A_ksplit.log; then
  export MK_MLA_MMA=wg
  TAIL=14 cmd B_mla_wg_tests 100 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py
  ci C_ci_mla_wg_99006 150 -k mla --k3diff-seed 99006 --k3diff-preset full
  TAIL=10 cmd D_bench_mla 110 python3 -m megakernel.tools.bench_mla --dims full --batches 1,8,64 --lens 1024,32768
  TAIL=120 cmd E_ncu 120 ncu --kernel-name regex:mla_attn_wg --launch-skip 1 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats \
    --section LaunchStats python3 scripts/gpu_calls/ncu_attn.py 64 32768 wgmma
else
  TAIL=40 cmd B_diag 90 python3 scripts/gpu_calls/wg_diag.py
fi
finish
