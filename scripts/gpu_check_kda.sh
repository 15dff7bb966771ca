#!/usr/bin/env bash
# The KDA step of the megakernel (megakernel/kda.py, k_kda_core.py) on a GPU machine; from the
# project root after `source .device/env.sh` (called by scripts/gpu_check.sh). Logs to $OUT.
#   1. its GPU tests (k3diff verdicts on chosen cases: null rows, two steps, outliers, a slot no
#      row owns; batch invariance);
#   2. `pytest --k3diff -k kda --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the core kernel (the decay applied along the value
#      axis instead of the key axis), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the k3diff cases of step 1 (plain values).
source "$(dirname "$0")/lane.sh"
T=tests/megakernel/test_mk_kda_gpu.py

step "kda 1. GPU tests"
lane_tests kda $T
step "kda 2. k3diff kda suite vs megakernel (ci profile)"
lane_suite kda
step "kda 3. planted bug: the decay along the value axis"
lane_planted kda k_kda_core.py \
  's/st\[r \* KPL + j\] \* ke\[j\]        # decayed state/st[r * KPL + j] * vec[2, part * RPS + warp + NW * r]/'
step "kda 4. sanitizer lane (memcheck) over the k3diff cases of step 1"
lane_memcheck kda $T "passes_k3diff and plain"
