#!/usr/bin/env bash
# call 39 (eleventh session): memcheck over the wgmma attention (opt-in, MK_MLA_MMA=wg), then call
# 35's whole check of the default path on this tree (the wgmma attention is not the default: its
# step is slower at 1 / 32k and 8 / 1k, call 38).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=8 cmd A_memcheck_wg 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,wgmma
TAIL=14 cmd B_mk_gpu 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py tests/megakernel/test_mk_gemv_gpu.py
ci C_ci_full_99003 200 --k3diff-seed 99003 --k3diff-preset full
ci D_ci_99004 $(left) --k3diff-seed 99004
finish
