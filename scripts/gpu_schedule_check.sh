#!/usr/bin/env bash
# The schedule dimension on one GPU, in one call of about 240 s, from the project root:
#   bash scripts/gpu_schedule_check.sh OUTDIR
# (the integrator sources .device/env.sh first, for CuTe DSL, and sets MEGAKERNEL_CACHE). Steps, each
# under its own time limit so a slow one cannot eat the next one's time; logs and tables in OUTDIR:
#   1. tests/k3diff/test_schedule_gpu.py: graph replay bit for bit, the planted graph and pressure
#      bugs caught under their schedule and passing eagerly, the controls, random numbers after a
#      failed capture                                                              (T1, 60 s)
#   2. the planted schedule bugs hunted without and with the dimension, the controls under it
#      (a row printed as each finishes: a cut run keeps its rows):
#      the table (caught with: examples, seconds, by what; caught without)       (T2, 110 s)
#   3. the megakernel (graph_safe) under graph replay, then under pressure, then with the
#      dimension off: the quick profile at the small preset, one seed; each run's cases/s side by
#      side (the cost)                                                       (T3, 3 x 22 s)
# PART=1|2|3 runs one step. DRY=1 prints the commands instead of running them (a CPU check of
# the script). The ci profile at both presets with and without the dimension, and k3diff
# sanitize over the regression seeds and 50 drawn ci seeds, are longer: PART=ci, over several
# calls of at most 10 minutes each (CI_PRESETS="small" or "full" picks the presets, default both;
# SANITIZE=0 leaves the sanitizers out, SANITIZE=only runs only them; SAN_JOBS=N runs N seeds
# under the sanitizer at once, default 1: they share the GPU, so its memory must hold N replays).
set -uo pipefail
OUT=${1:-${OUT:-/tmp/k3diff-schedule}}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PART=${PART:-all}
SEED=${K3DIFF_SEED:-6161}
MK=megakernel.backend:MegakernelBackend
PRESSURES=pressure:one_sm,pressure:half,pressure:all_but_one,pressure:l2
status=0
step() { echo; echo "=== $*"; }
# run LIMIT LOG CMD...: CMD under `timeout`, its output into LOG (or the command line, under DRY)
run() {
  local limit=$1 log=$2; shift 2
  if [ -n "${DRY:-}" ]; then echo "+ timeout -k 5 $limit $*  > $log"; return 0; fi
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && echo "(cut at $limit s)"
  return $rc
}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }

if [ -z "${DRY:-}" ]; then
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  python3 -c "import torch; print('torch', torch.__version__)
try:
    import triton; print('triton', triton.__version__)
except ImportError:
    print('no triton: the pressure schedules are skipped')"
  git rev-parse --short HEAD 2>/dev/null
fi

if want 1; then
  step "1. GPU tests of the schedule dimension"
  run "${T1:-60}" "$OUT/gpu_tests.txt" python3 -m pytest -q -rs -p no:cacheprovider tests/k3diff/test_schedule_gpu.py
  rc=$?; [ -z "${DRY:-}" ] && tail -15 "$OUT/gpu_tests.txt"
  [ $rc -ne 0 ] && { echo "GPU tests: exit $rc"; status=1; }
fi

if want 2; then
  step "2. planted schedule bugs, without and with the dimension; controls under it"
  run "${T2:-110}" "$OUT/schedule_hunt.txt" python3 -m k3diff.tools.schedule_hunt --device cuda \
    --examples "${EXAMPLES:-6}" --seed "$SEED" --timeout "${CASE_TIMEOUT:-30}"
  rc=$?; [ -z "${DRY:-}" ] && cat "$OUT/schedule_hunt.txt" | tail -20
  [ $rc -ne 0 ] && { echo "schedule hunt: exit $rc"; status=1; }
fi

if want 3; then
  for dim in graph pressure off; do
    step "3. megakernel, quick profile, small preset, seed $SEED, schedule: $dim"
    sched=$dim; [ "$dim" = pressure ] && sched=$PRESSURES
    t0=$(date +%s.%N)
    run "${T3:-22}" "$OUT/mk_$dim.txt" env K3DIFF_SCHEDULE="$sched" python3 -m pytest -p k3diff.plugin \
      tests/differential --k3diff --k3diff-backend $MK --k3diff-device cuda --k3diff-profile quick \
      --k3diff-preset small --k3diff-seed "$SEED" -k "fuzz and (moe or mla or kda)" \
      --k3diff-report "$OUT/mk_$dim.jsonl" -q -p no:cacheprovider
    rc=$?
    t1=$(date +%s.%N)
    if [ -z "${DRY:-}" ]; then
      grep -E "cases/s|schedule|failed|passed|FAIL" "$OUT/mk_$dim.txt" | head -12
      python3 scripts/schedule_report.py "$OUT/mk_$dim.jsonl" "$t0" "$t1" "$dim"
    fi
    [ $rc -ne 0 ] && [ $rc -ne 124 ] && { echo "megakernel ($dim): exit $rc"; status=1; }
  done
fi

if [ "$PART" = ci ] && [ "${SANITIZE:-1}" != only ]; then
  for preset in ${CI_PRESETS:-small full}; do
    for dim in on off; do
      step "ci, megakernel, preset $preset, seed $SEED, schedule dimension $dim"
      sched=""; [ "$dim" = off ] && sched=off
      run "${TCI:-280}" "$OUT/ci_${preset}_$dim.txt" env K3DIFF_SCHEDULE="$sched" python3 -m pytest -p k3diff.plugin \
        tests/differential --k3diff --k3diff-backend $MK --k3diff-device cuda --k3diff-profile ci \
        --k3diff-preset $preset --k3diff-seed "$SEED" --k3diff-report "$OUT/ci_${preset}_$dim.jsonl" -q -p no:cacheprovider
      rc=$?
      [ -z "${DRY:-}" ] && grep -E "cases/s|schedule|never crossed|passed|failed" "$OUT/ci_${preset}_$dim.txt" | head -12
      [ $rc -ne 0 ] && { echo "ci $preset ($dim): exit $rc"; status=1; }
    done
  done
fi
if [ "$PART" = ci ] && [ "${SANITIZE:-1}" != 0 ]; then
  step "sanitizers over the regression seeds and 50 ci seeds"
  run 120 "$OUT/seeds.txt" python3 scripts/schedule_seeds.py "$OUT/ci_seeds" --n 50 --seed "$SEED" --backend $MK
  for tool in memcheck racecheck synccheck initcheck; do
    run "${TSAN:-300}" "$OUT/sanitize_$tool.txt" python3 -m k3diff.cli sanitize corpora/regressions "$OUT/ci_seeds" \
      --tool $tool --backend $MK --jobs "${SAN_JOBS:-1}"
    rc=$?; [ -z "${DRY:-}" ] && tail -10 "$OUT/sanitize_$tool.txt"
    [ $rc -ne 0 ] && { echo "sanitize $tool: exit $rc"; status=1; }
  done
fi
exit $status
