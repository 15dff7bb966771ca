#!/usr/bin/env bash
# The schedule dimension on one GPU (CUDA-graph replay, SM and L2 pressure, batches past one wave,
# the sanitizers), from the project root; logs to $OUT. Steps:
#   1. the GPU tests of the dimension (tests/k3diff/test_schedule_gpu.py)
#   2. the planted schedule bugs hunted with and without the dimension, the controls under it
#      (python -m k3diff.tools.schedule_hunt)
#   3. the megakernel's ci profile at both presets with the dimension (a fresh seed), then the same
#      run with K3DIFF_SCHEDULE=off: cases/s side by side (the summary's lines)
#   4. k3diff sanitize over the regression seeds and 50 drawn ci seeds, each tool
# BACKEND=torch-blocked runs steps 3-4 on the PyTorch candidate (a GPU without CuTe DSL).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-schedule}; mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:-$PWD}
BACKEND=${BACKEND:-megakernel}
SEED=${K3DIFF_SEED:-$(date +%s)}
status=0
step() { echo; echo "=== $*"; }

step "1. GPU tests"
python3 -m pytest -q -p no:cacheprovider tests/k3diff/test_schedule_gpu.py -rs 2>&1 | tail -20 || status=1

step "2. planted schedule bugs, with and without the dimension"
python3 -m k3diff.tools.schedule_hunt --device cuda --examples "${EXAMPLES:-40}" | tee "$OUT/schedule_hunt.txt" || status=1

for preset in small full; do
  for dim in on off; do
    step "3. ci, $BACKEND, preset $preset, seed $SEED, schedule dimension $dim"
    env_sched=""; [ "$dim" = off ] && env_sched=off
    K3DIFF_SCHEDULE=$env_sched python3 -m pytest -p k3diff.plugin tests/differential --k3diff \
      --k3diff-backend "$BACKEND" --k3diff-device cuda --k3diff-profile ci --k3diff-preset $preset --k3diff-seed "$SEED" \
      --k3diff-report "$OUT/ci_${preset}_$dim.jsonl" -q -p no:cacheprovider > "$OUT/ci_${preset}_$dim.txt" 2>&1
    rc=$?
    sed -n '/k3diff summary/,$p' "$OUT/ci_${preset}_$dim.txt" | grep -E "cases|schedule|never crossed|passed|failed" | head -20
    [ $rc -ne 0 ] && { echo "ci $preset ($dim): FAILED (exit $rc)"; status=1; }
  done
done

step "4. sanitizers over the regression seeds and 50 ci seeds"
python3 scripts/schedule_seeds.py "$OUT/ci_seeds" --n 50 --seed "$SEED" --backend "$BACKEND"
for tool in memcheck racecheck synccheck initcheck; do
  python3 -m k3diff.cli sanitize corpora/regressions "$OUT/ci_seeds" --tool $tool --backend "$BACKEND" \
    ${SANITIZE_EXCLUDE:+--exclude "$SANITIZE_EXCLUDE"} | tail -30 | tee "$OUT/sanitize_$tool.txt"
  [ "${PIPESTATUS[0]}" -ne 0 ] && { echo "sanitize $tool: FAILED"; status=1; }
done
exit $status
