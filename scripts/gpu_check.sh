#!/usr/bin/env bash
# One device call on a bare GPU machine (see README "GPU lanes"). From the project root, after
# `source .device/env.sh`. Writes logs to $OUT. Steps:
#   1. the megakernel's own GPU tests;
#   2. `pytest --k3diff -k moe --k3diff-profile ci` against the megakernel (controls and batch
#      invariance included), then again with MEGAKERNEL_STREAMS=persistent (the one-launch step);
#   3. a bug planted in a throwaway copy of the kernel (ties to the higher expert id in the route
#      kernel), hunted with `k3diff hunt`; the copy is deleted afterwards; 3b. the same for the
#      tensor-core GEMV (k_gemv_mma.py: the two B words of an mma swapped in every token tile but
#      the first, so only batches > 8 go wrong; every GEMV on it for the hunt, MK_GEMV_MMA=1);
#   4. the sanitizer lane: compute-sanitizer memcheck over the regression seeds of the moe stage;
#   5. the same for the KDA step (scripts/gpu_check_kda.sh); 6. for the MLA step (gpu_check_mla.sh);
#   7. for the layer stage (gpu_check_layer.sh); 8. the attention steps' side stream
#      (gpu_check_side.sh: the stream modes' bits, tune_fork, the planted column-slice bugs);
#   9. the production-shape suites of every stage (gpu_check_prod.sh: `--k3diff-preset full
#      --k3diff-profile ci` per stage; red when a suite fails, a declared boundary is never crossed
#      or no case ran at K3's real dims).
# The ci suites of steps 2, 5-7 run the default preset, which on a GPU judges one case in three
# at K3's real dims (k3diff/strategies.py); step 9 judges half.
# Arguments: the steps to run (1-9; default all; 2 includes 2b, 3 includes 3b).
# scripts/gpu_check_all.sh runs the same steps as lanes side by side, one GPU each.
set -uo pipefail
ARGS="$*"
run_step() { [ -z "$ARGS" ] || [[ " $ARGS " == *" $1 "* ]]; }
PLANT=${PLANT:-/tmp/planted}   # the throwaway copy (one per lane when lanes run side by side)
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261129}
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv | tee "$OUT/gpu.txt"
step() { echo; echo "=== $*"; }

if run_step 1; then
  step "1. megakernel GPU tests"
  python3 -m pytest -q -x tests/megakernel --ignore=tests/megakernel/test_mk_mla_gpu.py -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/mk_tests.txt"
fi

if run_step 2; then
  step "2. k3diff moe suite vs megakernel (ci profile)"
  python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
    -k moe --k3diff-seed $SEED --k3diff-report "$OUT/moe_cases.jsonl" -q -p no:cacheprovider 2>&1 \
    | tail -14 | tee "$OUT/k3diff_moe.txt"
fi

if run_step 2; then
  step "2b. the same suite against the one-launch (persistent) kernel"
  MEGAKERNEL_STREAMS=persistent python3 -m pytest -p k3diff.plugin tests/differential --k3diff \
    --k3diff-backend $MK --k3diff-profile ci -k moe --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 \
    | tail -6 | tee "$OUT/k3diff_moe_persistent.txt"
fi

if run_step 3; then
  step "3. planted bug: route kernel breaks ties toward the higher id"
  rm -rf $PLANT && mkdir $PLANT && cp -r k3diff reference megakernel $PLANT/
  sed -i 's/((ov == v) \& (oi < i))/((ov == v) \& (oi > i))/; s/if vals\[j\] > bv:/if vals[j] >= bv:/' \
    $PLANT/megakernel/k_route.py
  diff <(cat megakernel/k_route.py) $PLANT/megakernel/k_route.py | head -8
  (cd $PLANT && PYTHONPATH=$PLANT:$PYTHONPATH python3 -m k3diff.cli hunt --backend $MK \
    --stage moe --examples 80 --seed $SEED 2>&1 | head -6 | tee "$OUT/planted.txt")
  rm -rf $PLANT
fi

if run_step 3; then
  step "3b. planted bug: the tensor-core GEMV swaps B words past the first token tile (T > 8)"
  rm -rf $PLANT && mkdir $PLANT && cp -r k3diff reference megakernel $PLANT/
  sed -i 's/xw\[2 \* j\], xw\[2 \* j + 1\],/xw[2 * j + (1 if n else 0)], xw[2 * j + (0 if n else 1)],/' \
    $PLANT/megakernel/k_gemv_mma.py
  diff megakernel/k_gemv_mma.py $PLANT/megakernel/k_gemv_mma.py | head -4
  # MK_GEMV_MMA=1: every GEMV on the tensor cores (the MoE's are on the CUDA cores by default)
  (cd $PLANT && MK_GEMV_MMA=1 PYTHONPATH=$PLANT:$PYTHONPATH python3 -m k3diff.cli hunt \
    --backend $MK --stage moe --examples 80 --seed $SEED 2>&1 | head -6 | tee "$OUT/planted_gemv_mma.txt")
  rm -rf $PLANT
fi

if run_step 4; then
  step "4. sanitizer lane (memcheck) over the moe regression seeds"
  for seed in corpora/regressions/moe-*.json; do
    compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m k3diff.cli replay "$seed" --backend $MK \
      > $PLANT.sanitizer.log 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|^PASS|^FAIL|rror" $PLANT.sanitizer.log | head -4
    echo "exit $rc for $seed"
  done 2>&1 | tee "$OUT/sanitizer.txt"
fi

if run_step 5; then
  step "5. the KDA step (scripts/gpu_check_kda.sh)"
  bash scripts/gpu_check_kda.sh
fi

if run_step 6; then
  step "6. the MLA step (scripts/gpu_check_mla.sh)"
  bash scripts/gpu_check_mla.sh
fi

if run_step 7; then
  step "7. the layer stage (scripts/gpu_check_layer.sh)"
  bash scripts/gpu_check_layer.sh
fi

if run_step 8; then
  step "8. the attention steps' side stream (scripts/gpu_check_side.sh 1 3 5)"
  bash scripts/gpu_check_side.sh 1 3 5
fi

if run_step 9; then
  step "9. the production-shape suites of every stage (scripts/gpu_check_prod.sh)"
  bash scripts/gpu_check_prod.sh
fi
