#!/usr/bin/env bash
# The KDA step of the megakernel (megakernel/kda.py, k_kda_core.py) on a GPU machine; from the
# project root after `source .device/env.sh` (called by scripts/gpu_check.sh). Logs to $OUT.
#   1. its GPU tests (k3diff verdicts on chosen cases: null rows, two steps, outliers, a slot no
#      row owns; batch invariance);
#   2. `pytest --k3diff -k kda --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the core kernel (the decay applied along the value
#      axis instead of the key axis), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the k3diff cases of step 1 (plain values).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261201}
step() { echo; echo "=== $*"; }

step "kda 1. GPU tests"
python3 -m pytest -q tests/megakernel/test_mk_kda_gpu.py -p no:cacheprovider 2>&1 | tail -3 \
  | tee "$OUT/kda_tests.txt"

step "kda 2. k3diff kda suite vs megakernel (ci profile)"
python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
  -k kda --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 | tail -12 | tee "$OUT/k3diff_kda.txt"

step "kda 3. planted bug: the decay along the value axis"
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r k3diff reference megakernel /tmp/planted/
sed -i 's/st\[r \* KPL + j\] \* ke\[j\]        # decayed state/st[r * KPL + j] * vec[2, part * RPS + warp + NW * r]/' \
  /tmp/planted/megakernel/k_kda_core.py
diff megakernel/k_kda_core.py /tmp/planted/megakernel/k_kda_core.py | head -4
(cd /tmp/planted && PYTHONPATH=/tmp/planted:$PYTHONPATH python3 -m k3diff.cli hunt --backend $MK \
  --stage kda --examples 40 --seed $SEED 2>&1 | head -6 | tee "$OUT/kda_planted.txt")
rm -rf /tmp/planted

step "kda 4. sanitizer lane (memcheck) over the k3diff cases of step 1"
compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_kda_gpu.py -k "passes_k3diff and plain" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" \
  | tee "$OUT/kda_sanitizer.txt"
