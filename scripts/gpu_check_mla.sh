#!/usr/bin/env bash
# The MLA step of the megakernel (megakernel/mla.py) on a GPU machine; from the project root after
# `source .device/env.sh`.
#   1. its GPU tests (k3diff verdicts: empty caches, split boundaries, ragged lengths; batch
#      invariance);
#   2. `pytest --k3diff -k mla --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the attention kernel (the last row of every split
#      skipped), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the k3diff cases of step 1 (plain values);
#   5. steps 1, 2 and 4 again with the attention on the tensor cores (MK_MLA_MMA=1,
#      k_mla_attn_mma.py: not yet run on a GPU, off by default).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261201}
step() { echo; echo "=== $*"; }

step "mla 1. GPU tests"
python3 -m pytest -q tests/megakernel/test_mk_mla_gpu.py -p no:cacheprovider 2>&1 | tail -15 \
  | tee "$OUT/mla_tests.txt"

step "mla 2. k3diff mla suite vs megakernel (ci profile)"
python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
  -k mla --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 | tail -12 | tee "$OUT/k3diff_mla.txt"

step "mla 3. planted bug: the last cache row of every split skipped"
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r k3diff reference megakernel /tmp/planted/
sed -i 's/end = cutlass.min(s \* ch + ch, n)/end = cutlass.min(s * ch + ch, n) - 1/' /tmp/planted/megakernel/k_mla_attn.py
diff megakernel/k_mla_attn.py /tmp/planted/megakernel/k_mla_attn.py | head -4
(cd /tmp/planted && PYTHONPATH=/tmp/planted:$PYTHONPATH python3 -m k3diff.cli hunt --backend $MK \
  --stage mla --examples 40 --seed $SEED 2>&1 | head -6 | tee "$OUT/mla_planted.txt")
rm -rf /tmp/planted

step "mla 4. sanitizer lane (memcheck) over the k3diff cases of step 1"
compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" \
  | tee "$OUT/mla_sanitizer.txt"

step "mla 5. the tensor-core attention (MK_MLA_MMA=1): GPU tests, ci suite, memcheck"
MK_MLA_MMA=1 python3 -m pytest -q tests/megakernel/test_mk_mla_gpu.py -p no:cacheprovider 2>&1 | tail -15 \
  | tee "$OUT/mla_mma_tests.txt"
MK_MLA_MMA=1 python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK \
  --k3diff-profile ci -k mla --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 | tail -12 \
  | tee "$OUT/k3diff_mla_mma.txt"
MK_MLA_MMA=1 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" \
  | tee "$OUT/mla_mma_sanitizer.txt"
