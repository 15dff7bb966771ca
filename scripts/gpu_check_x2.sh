#!/usr/bin/env bash
# One device call on a machine with two GPUs (kind nvidia-h200-x2), CuTe DSL from .device/, after
# `source .device/env.sh`. Everything runs against the megakernel; logs to $OUT (<= 8 files):
#   phase 1 (both GPUs): `pytest --k3diff -n 2 -k moe --k3diff-profile ci` in the fork-join mode and
#     in the one-launch (persistent) mode on the same seed, each worker on its own GPU; one report of
#     the first, a `k3diff report --compare` of the two (issue 15);
#   phase 2, GPU 0: `pytest --k3diff --k3diff-preset full -k moe --k3diff-profile ci` (issue 12);
#   phase 2, GPU 1: the planted E > 256 bug hunted in the full preset (issue 12), a CUDA illegal
#     address on one batch size judged as a crash while the run goes on (issue 11), the cuda
#     throughput bench against the c9944a8 tree in BASE_TREE if given (issue 12), and fla's KDA
#     decode under k3diff on GPU 0 when FLA_WHEEL points at the fla-core wheel (issue 14).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
W=/tmp/k3x2; rm -rf $W; mkdir -p $W
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261130}
# the plugin: through its entry point where k3diff is installed, else by PYTEST_PLUGINS (xdist workers
# inherit the environment, where a -p flag may not reach them)
python3 -c "from importlib.metadata import entry_points as e; import sys; sys.exit(0 if any(p.value == 'k3diff.plugin' for p in e(group='pytest11')) else 1)" \
  || export PYTEST_PLUGINS=k3diff.plugin
K="python3 -m pytest tests/differential --k3diff --k3diff-seed $SEED -q -p no:cacheprovider"
LOG=$OUT/log.txt
say() { echo; echo "=== [$SECONDS s] $*"; }
END=${BUDGET:-570}                 # seconds for the whole script: every step's limit is cut to fit
lim() { local l=$((END - SECONDS)); [ "$l" -lt 5 ] && l=5; [ "$1" -lt "$l" ] && echo "$1" || echo "$l"; }
# SIGINT first: pytest then still prints its summary (and k3diff its table) for what it judged
T() { local l; l=$(lim "$1"); shift; timeout -s INT -k 15 "$l" "$@"; }
PROFILE=${PROFILE:-ci}             # the two-GPU runs of phase 1; quick to save device time
STEPS=${STEPS:-full,planted,crash,bench,fla}
{
nvidia-smi -L
say "1a. moe ci, fork-join, -n 2 (one worker per GPU)"
T 150 $K --k3diff-backend $MK -k moe --k3diff-profile $PROFILE -n 2 --k3diff-report $OUT/fork.jsonl 2>&1 | tail -22
say "1b. moe ci, one persistent launch, -n 2, same seed"
MEGAKERNEL_STREAMS=persistent T 120 $K --k3diff-backend $MK -k moe --k3diff-profile $PROFILE -n 2 \
  --k3diff-report $OUT/persistent.jsonl 2>&1 | tail -8
} > $LOG 2>&1

( timeout $(lim 60) python3 -m k3diff.cli report $OUT/fork.jsonl -o $OUT/report.html
  timeout $(lim 60) python3 -m k3diff.cli report --compare $OUT/fork.jsonl $OUT/persistent.jsonl -o $OUT/compare.html
  echo "compare exit $?" ) > $W/report.txt 2>&1 &

( export CUDA_VISIBLE_DEVICES=0
  has() { [[ ",$STEPS," == *",$1,"* ]]; }
  if has full; then say "2. GPU0: moe ci in the full preset"
  T 230 $K --k3diff-backend $MK -k moe --k3diff-preset full --k3diff-profile ci \
    --k3diff-report $OUT/full_cases.jsonl 2>&1 | tail -40; fi
  if has planted; then
  say "3. GPU0: planted bug, k_route scores expert tid+256 as tid+255 (E > 256 only), hunted"
  rm -rf /tmp/planted && mkdir /tmp/planted && cp -r k3diff reference megakernel /tmp/planted/
  sed -i 's/^\( *\)bi = tid + j \* THREADS$/\1bi = tid + j * THREADS - 1/' /tmp/planted/megakernel/k_route.py
  diff megakernel/k_route.py /tmp/planted/megakernel/k_route.py
  (cd /tmp/planted && PYTHONPATH=/tmp/planted:$PYTHONPATH T 200 python3 -m k3diff.cli hunt --backend $MK --stage moe \
     --examples ${HUNT_EXAMPLES:-80} --seed $SEED --preset full 2>&1 | head -5)
  rm -rf /tmp/planted; fi
  if [ -n "${FLA_WHEEL:-}" ] && has fla; then
    say "6. GPU0: fla KDA decode, kda ci"
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fla $FLA_WHEEL >/dev/null 2>&1
    PYTHONPATH=/tmp/fla:$PYTHONPATH T 90 $K --k3diff-backend fla -k kda --k3diff-profile ci 2>&1 | tail -7
  fi ) > $W/gpu0.txt 2>&1 &

( export CUDA_VISIBLE_DEVICES=1
  has() { [[ ",$STEPS," == *",$1,"* ]]; }
  if has crash; then
  say "4. GPU1: a CUDA illegal address on batch 3: crash, the run goes on"
  PYTHONPATH=$PWD/tests/k3diff:$PYTHONPATH T 70 $K --k3diff-backend crashing_candidates:CudaIllegalAddress \
    -k "fuzz and moe" --k3diff-profile quick --k3diff-device cuda --k3diff-timeout 60 --k3diff-save $W/crash_seeds 2>&1 | tail -12
  ls $W/crash_seeds
  for s in $W/crash_seeds/*.json; do PYTHONPATH=$PWD/tests/k3diff:$PYTHONPATH T 30 python3 -m k3diff.cli replay $s \
    --backend crashing_candidates:CudaIllegalAddress --device cuda 2>&1 | head -2; echo "replay exit ${PIPESTATUS[0]}"; done; fi
  if has bench; then
  say "5. GPU1: throughput, moe on cuda (small vs ${BASE_TREE:-none}; full)"
  T ${BENCH_LIMIT:-120} python3 -m k3diff.tools.throughput --device cuda --backend $MK --preset small --stages moe --cases ${BENCH_CASES:-100} \
    --compare-with ${BASE_TREE:-none} 2>&1 | tail -4
  T 60 python3 -m k3diff.tools.throughput --device cuda --backend $MK --preset full --keep-preset full \
    --stages moe --cases 10 --compare-with none 2>&1 | tail -3; fi
  true ) > $W/gpu1.txt 2>&1 &
wait
{ cat $W/gpu0.txt; cat $W/gpu1.txt; echo; echo "=== report"; cat $W/report.txt; echo "=== done at $SECONDS s"; } >> $LOG
tail -c 11000 $LOG
