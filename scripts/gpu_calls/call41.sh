#!/usr/bin/env bash
# call 41 (eleventh session): k_mla_attn_wg.py with splits of 512 rows past SHORT (its own) beside
# its splits of 256 and the mma.sync kernel, alone; then with MK_MLA_MMA=wg its GPU tests, ci's
# MLA and layer cases at full dims, and the step bench (the other attention side by side).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-400}
TAIL=12 cmd A_ksplit 120 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x32768,8x32768,64x8192,64x32768 --variants unsplit,ksplit+mtc2,wgmma256,wgmma
if grep -q "within its error bound: ok" $R/A_ksplit.log; then
  export MK_MLA_MMA=wg
  TAIL=14 cmd B_mla_wg_tests 100 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py
  TAIL=10 cmd C_bench_mla 110 python3 -m megakernel.tools.bench_mla --dims full
  ci D_ci_wg_99007 $(left) -k "mla or layer" --k3diff-seed 99007 --k3diff-preset full
fi
finish
