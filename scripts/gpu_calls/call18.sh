#!/usr/bin/env bash
# call 18 (eighth session): MLA's absorb and value projection on the tensor cores (k_mla_heads.py),
# judged and timed. The kernel cache is built on the CPU first (every megakernel/ source change
# renames every stored kernel):
#     MEGAKERNEL_CACHE=/tmp/mkc python -m megakernel compile --arch sm_90a --dims full,small
#     mkdir -p .gpu && tar czf .gpu/mkc.tgz -C /tmp/mkc .
# then, carrying [".device", ".gpu"]: bash scripts/gpu_calls/call18.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-580}
TAIL=12 cmd A_mla_gpu_tests 110 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py
ci B_ci_95009 170 --k3diff-seed 95009
TAIL=30 cmd C_bench_mla 200 python3 -m megakernel.tools.bench_mla --dims full
TAIL=12 cmd D_ksplit 90 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,8x32768,64x32768
finish
