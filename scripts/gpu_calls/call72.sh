#!/usr/bin/env bash
# call 72 (seventeenth session): the whole MLA check after two defaults changed on call 70's
# measure: the TMA attention recomputes the query's descriptors per tile (k_mla_attn_tma.py
# `remat`, same m and acc bits) and the lat-only merge runs 128 x 4 above batch 8 (k_mla_merge.py
# variant, same bits). Bits against wgmma and the held kernel, the MLA step's bench, memcheck over
# both, the MLA and layer GPU tests, then ci's MLA and layer cases at the full preset.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=12 cmd A_ksplit 60 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,2x3000,1x1024,8x8192,64x8192,64x32768 \
  --variants wgmma,tma,tma_held
TAIL=14 cmd B_bench_mla 60 python3 -m megakernel.tools.bench_mla --dims full
TAIL=6 cmd C_memcheck 60 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants tma
TAIL=6 cmd C2_memcheck_merge 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.tune_attn --splits 4 --hgs '' --batches '' --merges '' --lat-merges v128x4 --lat-rows 3x3000,12x300
TAIL=10 cmd D_tests 170 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py tests/megakernel/test_mk_layer_gpu.py
ci E_ci_mla_layer_99017 $(left) -k "mla or layer" --k3diff-seed 99017 --k3diff-preset full
finish
