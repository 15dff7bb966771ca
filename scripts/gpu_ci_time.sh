#!/usr/bin/env bash
# Issue 28, "speed to match": the whole `pytest --k3diff --k3diff-profile ci` (every stage, real
# dims in each) against the megakernel on one H200, from a COLD kernel cache, timed. From the
# project root after `source .device/env.sh`:
#     bash scripts/gpu_ci_time.sh              # the default preset (1 case in 3 at real dims)
#     PRESET=full bash scripts/gpu_ci_time.sh  # --k3diff-preset full (half)
# Logs to $OUT: ci_time_full.txt (pytest), ci_time.jsonl (results), ci_time.txt (the summary,
# then the seconds per stage and preset from python -m k3diff.tools.run_times: cases/s, and how
# much the first cases of a stage paid for compiling). MEGAKERNEL_CACHE points at an empty folder
# for the run (KEEP_CACHE=1: the usual one, a warm run). Exit 1 when the suite fails, a stage ran
# no case at real dims, or the run took longer than LIMIT seconds (default 600).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-$RANDOM$RANDOM}
LIMIT=${LIMIT:-600}
if [ "${KEEP_CACHE:-0}" != 1 ]; then export MEGAKERNEL_CACHE=$(mktemp -d /tmp/mkc-cold.XXXX); fi
echo "seed $SEED, preset ${PRESET:-default}, kernel cache ${MEGAKERNEL_CACHE:-default}"
python3 -m k3diff.tools.plan --backend $MK --profile ci ${PRESET:+--preset $PRESET} --seed "$SEED" | grep -v '^  ' \
  > "$OUT/ci_plan.txt"
start=$SECONDS
python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK --k3diff-profile ci \
  ${PRESET:+--k3diff-preset $PRESET} --k3diff-seed "$SEED" --k3diff-report "$OUT/ci_time.jsonl" \
  -q -p no:cacheprovider > "$OUT/ci_time_full.txt" 2>&1
rc=$?
wall=$((SECONDS - start))
{ sed -n '/k3diff summary/,$p' "$OUT/ci_time_full.txt"
  echo "pytest exit $rc after $wall s (limit $LIMIT s)"
  python3 -m k3diff.tools.run_times "$OUT/ci_time.jsonl" --need-full moe,mla,kda,layer
} | tee "$OUT/ci_time.txt"
need_full=${PIPESTATUS[0]}
[ "${KEEP_CACHE:-0}" != 1 ] && rm -rf "$MEGAKERNEL_CACHE"
[ "$rc" -eq 0 ] && [ "$need_full" -eq 0 ] && [ "$wall" -le "$LIMIT" ]
