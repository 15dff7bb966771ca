#!/usr/bin/env bash
# The layer stage of the megakernel (megakernel/layer.py, k_attn_res.py) on a GPU machine; from the
# project root after `source .device/env.sh` (called by scripts/gpu_check.sh). Logs to $OUT.
#   1. its GPU tests (k3diff verdicts for dense, MoE, KDA and MLA layers, block-write layers
#      among them; batch invariance);
#   2. `pytest --k3diff -k layer --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the AttnRes kernel (the prefix source left out of the
#      depth mix), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the GPU tests at batch 1.
source "$(dirname "$0")/lane.sh"
T=tests/megakernel/test_mk_layer_gpu.py

step "layer 1. GPU tests"
lane_tests layer $T
step "layer 2. k3diff layer suite vs megakernel (ci profile)"
lane_suite layer
step "layer 3. planted bug: the prefix source left out of the depth mix"
lane_planted layer k_attn_res.py 's/m\[e\] = wn \* pv\[e\]/m[e] = Float32(0.0)/'
step "layer 4. sanitizer lane (memcheck) over the GPU tests at batch 1"
lane_memcheck layer $T "passes_k3diff and T1"
