#!/usr/bin/env bash
# call 66 (fourteenth session): the whole MLA check on the new kernels: the attention's scores
# split between its warpgroups (k_mla_attn_tma.py) and the lat-only merge by 16-byte loads
# (k_mla_merge.py). The attention alone against wgmma (m, acc bits; l within 2^-20; float64
# error), the merge variants (bits), the MLA and layer GPU tests, memcheck and racecheck over
# the new kernels, ci's MLA and layer cases at the full preset.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=14 cmd A_ksplit 50 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,2x3000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma
TAIL=12 cmd A2_lat_merge 30 python3 -m megakernel.tools.tune_attn --splits 4 --hgs '' --batches '' --merges ''
TAIL=10 cmd B_tests 170 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py tests/megakernel/test_mk_layer_gpu.py
TAIL=8 cmd C_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,tma
TAIL=6 cmd C2_memcheck_merge 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.tune_attn --splits 4 --hgs '' --batches '' --merges '' --lat-merges v32x8 --lat-rows 3x3000,2x300
TAIL=8 cmd D_racecheck 50 compute-sanitizer --tool racecheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 1x3000 --variants unsplit,tma
ci E_ci_mla_layer_99014 $(left) -k "mla or layer" --k3diff-seed 99014 --k3diff-preset full
finish
