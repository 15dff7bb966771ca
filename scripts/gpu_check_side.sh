#!/usr/bin/env bash
# The attention steps' side stream (megakernel/side_stream.py: MLA's and KDA's gate GEMV beside
# the chain, written into a column slice by the GEMVs' ldy) on a GPU machine; from the project
# root after `source .device/env.sh`. Logs to $OUT. Arguments: the steps to run (default all).
#   1. every mode keeps the bits (tests/megakernel/test_mk_side_stream_gpu.py: MLA and KDA at full
#      dims, batch 1 and 9, serial / fork at the start / after the first GEMV / a capped side
#      grid, and a CUDA graph replay);
#   2. the MLA and KDA GPU tests (k3diff verdicts) in the default mode;
#   3. `python -m megakernel.tools.tune_fork`: every setting side by side, bits checked;
#   4. `pytest --k3diff -k <stage> --k3diff-profile ci` for mla, kda and layer;
#   5. planted bugs in throwaway copies, hunted: the GEMV's column-slice stride ignored (the
#      gate lands in the wrong columns: mla), the gated norm reading the gate at its old offset
#      (kda);
#   6. compute-sanitizer memcheck over the MLA and KDA k3diff GPU tests (plain values).
source "$(dirname "$0")/lane.sh"
ARGS="$*"
run_step() { [ -z "$ARGS" ] || [[ " $ARGS " == *" $1 "* ]]; }

if run_step 1; then
  step "side 1. the stream modes keep the bits (full dims)"
  python3 -m pytest -q tests/megakernel/test_mk_side_stream_gpu.py -p no:cacheprovider 2>&1 \
    | tail -15 | tee "$OUT/side_tests.txt"
fi
if run_step 2; then
  step "side 2. the MLA and KDA GPU tests in the default mode"
  lane_tests mla tests/megakernel/test_mk_mla_gpu.py
  lane_tests kda tests/megakernel/test_mk_kda_gpu.py
fi
if run_step 3; then
  step "side 3. tune_fork: serial against each fork point and side-grid cap"
  python3 -m megakernel.tools.tune_fork ${TUNE_FORK_ARGS:-} 2>&1 | tee "$OUT/tune_fork.txt"
fi
if run_step 4; then
  for s in mla kda layer; do
    step "side 4. k3diff $s suite vs megakernel (ci profile)"
    lane_suite $s
  done
fi
if run_step 5; then
  step "side 5. planted: the GEMV's column-slice stride ignored (mla)"
  lane_planted mla k_gemv_mma.py 's/stride=(self.ldy, 1)))/stride=(self.N, 1)))/' side_planted_mla
  step "side 5. planted: the gated norm reads the gate at its old offset 3P (kda)"
  lane_planted kda k_kda_norm.py 's/Z\[t, kd.G0 + c0\]/Z[t, 3 * P + c0]/' side_planted_kda
fi
if run_step 6; then
  step "side 6. memcheck over the MLA and KDA k3diff GPU tests (plain values)"
  lane_memcheck mla tests/megakernel/test_mk_mla_gpu.py "passes_k3diff and plain"
  lane_memcheck kda tests/megakernel/test_mk_kda_gpu.py "passes_k3diff and plain"
fi
