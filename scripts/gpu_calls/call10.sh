#!/usr/bin/env bash
# call 10 (fifth session): a GPU case's caches and states drawn on the GPU (case version 2), MLA's
# attention with ksplit and 2 head tiles per CTA the default. The draw's cost side by side (v1
# against v2), the full preset at a fresh seed, the attention's layouts timed against float64,
# memcheck over the MLA step, then nightly shards of seed 93001 while time is left
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
TAIL=12 cmd X_draw 90 python3 scripts/gpu_calls/draw_bench.py
ci B_all_full_92001 150 --k3diff-preset full --k3diff-seed 92001
TAIL=12 cmd D_mla_layouts 70 python3 -m megakernel.tools.mla_ksplit
TAIL=8 cmd M_memcheck_mla 110 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
  -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain"
nightly_shards 93001 8 ${SHARDS:-1 2 3 4 5 6 7 8}
finish
