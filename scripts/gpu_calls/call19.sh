#!/usr/bin/env bash
# call 19 (eighth session): the whole check at full dims on the final MLA tree (k_mla_heads.py; the
# two attention variants call 18 measured are gone again), memcheck over the MLA step, issue 34's
# megakernel-ep on ranks sharing one H200 (call 17 found the entry point unknown there: the GPU
# machine has no pip install, so the module:object spec), and the tensor-core GEMV's rows per warp
# (MT, bits unchanged) at batch 64, where the steps' GEMVs run at about half their batch-1 rate.
# Cache built on the CPU as call 18's; carrying [".device", ".gpu"]: bash scripts/gpu_calls/call19.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-585}
EP=megakernel.backend:MegakernelEPBackend
ci A_ci_full_96005 150 --k3diff-seed 96005 --k3diff-preset full
TAIL=8 cmd B_memcheck_mla 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q \
  -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain-lens2"
TAIL=30 cmd C_ep_gpu_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_ep_gpu.py
BACKEND=$EP ci D_ep_ci_2ranks 100 -k moe --k3diff-ranks 2 --k3diff-seed 97001
TAIL=60 cmd E_tune_gemv_b64 $(left) python3 -m megakernel.tools.tune_gemv --batches 64 --U 2 \
  --RTKS 1x4,2x4,2x2,4x2 --MT 1,2 --R 10 --shapes kda_x,kda_out,mla_x,mla_out,gemv_x,gemv_shared,out_shared,out_routed
finish
