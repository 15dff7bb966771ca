#!/usr/bin/env bash
# The MLA step of the megakernel (megakernel/mla.py) on a GPU machine; from the project root after
# `source .device/env.sh` (called by scripts/gpu_check.sh). Logs to $OUT.
#   1. its GPU tests (k3diff verdicts: empty caches, split boundaries, ragged lengths; batch
#      invariance);
#   2. `pytest --k3diff -k mla --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the attention kernel (k_mla_attn_wg.py on sm_90a: the
#      last row of every walk skipped), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the k3diff cases of step 1 (plain values);
#   5. steps 1-4 again with the CUDA-core attention (MK_MLA_MMA=0, k_mla_attn.py);
#   6. steps 1-3 with the mma.sync attention (MK_MLA_MMA=sync, k_mla_attn_mma.py: GB300's; the last
#      row of every split skipped).
source "$(dirname "$0")/lane.sh"
T=tests/megakernel/test_mk_mla_gpu.py

step "mla 1. GPU tests"
lane_tests mla $T
step "mla 2. k3diff mla suite vs megakernel (ci profile)"
lane_suite mla
step "mla 3. planted bug: the last cache row of every walk skipped"
lane_planted mla k_mla_attn_wg.py 's/R1 = cutlass.min(R0 + W \* ch, n)/R1 = cutlass.min(R0 + W * ch, n) - 1/'
step "mla 4. sanitizer lane (memcheck) over the k3diff cases of step 1"
lane_memcheck mla $T "passes_k3diff and plain"
step "mla 5. the CUDA-core attention (MK_MLA_MMA=0): GPU tests, ci suite, planted bug, memcheck"
export MK_MLA_MMA=0
lane_tests mla_cuda $T
lane_suite mla k3diff_mla_cuda
lane_planted mla k_mla_attn.py 's/end = cutlass.min(s \* ch + ch, n)/end = cutlass.min(s * ch + ch, n) - 1/' mla_cuda_planted
lane_memcheck mla $T "passes_k3diff and plain" mla_cuda_sanitizer
step "mla 6. the mma.sync attention (MK_MLA_MMA=sync): GPU tests, ci suite, planted bug"
export MK_MLA_MMA=sync
lane_tests mla_sync $T
lane_suite mla k3diff_mla_sync
lane_planted mla k_mla_attn_mma.py 's/end = cutlass.min(start + ch, n)/end = cutlass.min(start + ch, n) - 1/' mla_sync_planted
