#!/usr/bin/env bash
# The production-shape suites of every stage (issue 28): one H200, from the project root after
# `source .device/env.sh`; called by scripts/gpu_check.sh (step 9) and as the prod_* lanes of
# scripts/gpu_check_all.sh. Logs to $OUT.
#     bash scripts/gpu_check_prod.sh                 # moe mla kda layer
#     bash scripts/gpu_check_prod.sh kda             # one stage
# For each stage: `pytest --k3diff --k3diff-profile ci --k3diff-preset full -k STAGE` against the
# megakernel (half the cases at K3's real dims, the rest at small dims around the kernel's declared
# boundaries, the boundary sweep included), its results in $OUT/prod_STAGE.jsonl and its summary in
# $OUT/prod_STAGE.txt; then the time per stage and preset (python -m k3diff.tools.run_times).
# A stage fails (exit 1 at the end) when its suite fails, when the coverage table names a declared
# boundary never crossed, or when no case ran at real dims: a run that forgot the production
# shapes is red the same day. PRESET=small (or unset: the default) runs the default preset instead.
# GPU_CHECK_DRY=1 prints each stage's command (tests/megakernel/test_gpu_check_all.py).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261202}
PRESET=${PRESET-full}
STAGES=${*:-moe mla kda layer}
status=0
for stage in $STAGES; do
  case "$stage" in moe|mla|kda|layer) ;; *) echo "gpu_check_prod.sh: unknown stage '$stage' (moe mla kda layer)" >&2; exit 2 ;; esac
  cmd="python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
${PRESET:+--k3diff-preset $PRESET }-k $stage --k3diff-seed $SEED --k3diff-report $OUT/prod_$stage.jsonl -q -p no:cacheprovider"
  echo; echo "=== prod $stage: $cmd"
  if [ "${GPU_CHECK_DRY:-0}" = 1 ]; then continue; fi
  start=$SECONDS
  $cmd > "$OUT/prod_${stage}_full.txt" 2>&1
  rc=$?
  echo "exit $rc after $((SECONDS - start)) s" >> "$OUT/prod_${stage}_full.txt"
  sed -n '/k3diff summary/,$p' "$OUT/prod_${stage}_full.txt" | tee "$OUT/prod_$stage.txt"
  python3 -m k3diff.tools.run_times "$OUT/prod_$stage.jsonl" --need-full "$stage" | tee -a "$OUT/prod_$stage.txt"
  need_full=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then echo "prod $stage: FAILED (pytest exit $rc)"; status=1; fi
  if ! grep -q "^never crossed: none" "$OUT/prod_$stage.txt"; then
    echo "prod $stage: FAILED (a declared boundary never crossed, or no coverage table)"; status=1
  fi
  if [ "$need_full" -ne 0 ]; then echo "prod $stage: FAILED (no case at K3's real dims)"; status=1; fi
done
exit $status
