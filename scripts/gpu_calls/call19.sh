#!/usr/bin/env bash
# call 19 (eighth session): the whole check at full dims after k_mla_heads.py (the full preset),
# memcheck over the MLA step, and issue 34's megakernel-ep on ranks sharing one H200 (call 17 found
# the entry point unknown there: the GPU machine has no pip install, so the module:object spec).
# Carrying [".device", ".gpu"] (.gpu/mkc.tgz: call 18's cache): bash scripts/gpu_calls/call19.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-580}
EP=megakernel.backend:MegakernelEPBackend
ci A_ci_full_96005 150 --k3diff-seed 96005 --k3diff-preset full
TAIL=8 cmd B_memcheck_mla 110 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
  -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain-lens2"
TAIL=30 cmd C_ep_gpu_tests 150 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_ep_gpu.py
BACKEND=$EP ci D_ep_ci_2ranks 120 -k moe --k3diff-ranks 2 --k3diff-seed 97001
BACKEND=$EP ci E_ep_ci_3ranks $(left) -k moe --k3diff-ranks 3 --k3diff-seed 97002 --k3diff-preset full
finish
