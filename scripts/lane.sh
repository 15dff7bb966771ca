# Sourced by the per-stage GPU lanes (gpu_check_kda.sh, gpu_check_mla.sh, gpu_check_layer.sh): the
# four steps each stage runs, as functions. From the project root after `source .device/env.sh`;
# logs to $OUT as <stage>_*.txt.
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261201}
PLANT=${PLANT:-/tmp/planted}   # the throwaway copy (one per lane when lanes run side by side)
step() { echo; echo "=== $*"; }

# lane_tests STAGE TESTFILE: the stage's GPU tests (k3diff verdicts on chosen cases)
lane_tests() {
  python3 -m pytest -q "$2" -p no:cacheprovider 2>&1 | tail -15 | tee "$OUT/$1_tests.txt"
}

# lane_suite STAGE [LOGNAME]: `pytest --k3diff -k STAGE --k3diff-profile ci` against the megakernel
lane_suite() {
  python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK \
    --k3diff-profile ci -k "$1" --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 | tail -25 \
    | tee "$OUT/${2:-k3diff_$1}.txt"
}

# lane_planted STAGE FILE SED_EXPR [LOGNAME]: the bug SED_EXPR planted in a throwaway copy of
# megakernel/FILE, hunted with `k3diff hunt`; refuses to hunt when the expression changed nothing
lane_planted() {
  local log="$OUT/${4:-$1_planted}.txt"
  rm -rf $PLANT && mkdir $PLANT && cp -r k3diff reference megakernel $PLANT/
  sed -i "$3" "$PLANT/megakernel/$2"
  if cmp -s "megakernel/$2" "$PLANT/megakernel/$2"; then
    echo "planted bug NOT APPLIED: the sed expression matched nothing in megakernel/$2" \
      | tee "$log"
  else
    diff "megakernel/$2" "$PLANT/megakernel/$2" | head -4
    (cd $PLANT && PYTHONPATH=$PLANT:${PYTHONPATH:-} python3 -m k3diff.cli hunt \
      --backend $MK --stage "$1" --examples 40 --seed $SEED 2>&1 | head -6 | tee "$log")
  fi
  rm -rf $PLANT
}

# lane_memcheck STAGE TESTFILE SELECTOR [LOGNAME]: compute-sanitizer memcheck over those tests
lane_memcheck() {
  compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
    "$2" -k "$3" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" | tee "$OUT/${4:-$1_sanitizer}.txt"
}
