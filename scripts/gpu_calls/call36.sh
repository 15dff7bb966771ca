#!/usr/bin/env bash
# call 36 (eleventh session; also call 37, the pipelined loop): MLA attention on wgmma (k_mla_attn_wg.py) first run: alone against
# the mma.sync kernel and float64, then (if within its bound) its GPU tests, the step bench with
# the other attention beside it, and the ci profile's MLA cases at full dims, all with
# MK_MLA_MMA=wg. If it is wrong: wg_diag.py's pattern, then call 35's checks of the default tree.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=12 cmd A_ksplit 120 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,8x32768,64x1024,64x32768 --variants unsplit,ksplit+mtc2,wgmma
if grep -q "within its error bound: ok" $R/A_ksplit.log; then
  export MK_MLA_MMA=wg
  TAIL=14 cmd B_mla_wg_tests 100 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py
  TAIL=10 cmd C_bench_mla 110 python3 -m megakernel.tools.bench_mla --dims full --batches 1,8,64 --lens 1024,32768
  ci D_ci_mla_wg_99005 $(left) -k mla --k3diff-seed 99005 --k3diff-preset full
else
  TAIL=40 cmd B_diag 90 python3 scripts/gpu_calls/wg_diag.py
  TAIL=14 cmd C_mk_gpu 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py tests/megakernel/test_mk_gemv_gpu.py
  ci D_ci_99004 $(left) --k3diff-seed 99004
fi
finish
