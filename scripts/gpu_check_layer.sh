#!/usr/bin/env bash
# The layer stage of the megakernel (megakernel/layer.py, k_attn_res.py) on a GPU machine; from the
# project root after `source .device/env.sh`. The backend serves `layer` only with
# MEGAKERNEL_LAYER=1 (set here) until this passes.
#   1. its GPU tests (k3diff verdicts for dense, MoE, KDA and MLA layers, block-write layers
#      among them; batch invariance);
#   2. `pytest --k3diff -k layer --k3diff-profile ci` against the megakernel;
#   3. a bug planted in a throwaway copy of the AttnRes kernel (the prefix source left out of the
#      depth mix), hunted with `k3diff hunt`; the copy is deleted afterwards;
#   4. compute-sanitizer memcheck over the GPU tests at batch 1.
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261201}
export MEGAKERNEL_LAYER=1
step() { echo; echo "=== $*"; }

step "layer 1. GPU tests"
python3 -m pytest -q tests/megakernel/test_mk_layer_gpu.py -p no:cacheprovider 2>&1 | tail -15 \
  | tee "$OUT/layer_tests.txt"

step "layer 2. k3diff layer suite vs megakernel (ci profile)"
python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
  -k layer --k3diff-seed $SEED -q -p no:cacheprovider 2>&1 | tail -12 | tee "$OUT/k3diff_layer.txt"

step "layer 3. planted bug: the prefix source left out of the depth mix"
rm -rf /tmp/planted && mkdir /tmp/planted && cp -r k3diff reference megakernel /tmp/planted/
sed -i 's/acc = cute.math.exp(lg\[n\] - mx) \* pv\[e\]       # the prefix source, v_n/acc = Float32(0.0)/' \
  /tmp/planted/megakernel/k_attn_res.py
diff megakernel/k_attn_res.py /tmp/planted/megakernel/k_attn_res.py | head -4
(cd /tmp/planted && PYTHONPATH=/tmp/planted:$PYTHONPATH python3 -m k3diff.cli hunt --backend $MK \
  --stage layer --examples 40 --seed $SEED 2>&1 | head -6 | tee "$OUT/layer_planted.txt")
rm -rf /tmp/planted

step "layer 4. sanitizer lane (memcheck) over the GPU tests at batch 1"
compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_layer_gpu.py -k "passes_k3diff and T1" 2>&1 | grep -E "ERROR SUMMARY|passed|failed" \
  | tee "$OUT/layer_sanitizer.txt"
