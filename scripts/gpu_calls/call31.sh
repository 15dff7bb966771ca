#!/usr/bin/env bash
# call 31 (tenth session): the whole check after the GEMVs at batch > 8 moved to wgmma (gemv.py's
# _LARGE_T; the same bits as mma.sync by call 30's measurement, so no verdict should move):
# the megakernel's GPU tests, the ci profile at full and default presets, memcheck over the
# wgmma GEMVs. Kernel cache built on the CPU first (python -m megakernel compile --dims full,small).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-480}
TAIL=14 cmd A_mk_gpu 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py
ci B_ci_full_99001 180 --k3diff-seed 99001 --k3diff-preset full
ci C_ci_99002 100 --k3diff-seed 99002
TAIL=10 cmd D_memcheck_gemv $(left) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.tune_gemv \
  --preset small --own-ks --batches 9,64 --RTKS 4x2,4x4 --WG 1 --R 2 --shapes gemv_x,kda_fb,mla_qb,kda_out
finish
