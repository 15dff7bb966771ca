#!/usr/bin/env bash
# The verdict's GPU lane (issue 11), one device call, from the project root after
# `source .device/env.sh`:
#   1. crash demos on GPU 0: candidates that store to an unmapped address (Triton) or trip a
#      device-side assert on batch 3, fuzzed by the moe ci suite. Each crash is judged "crash:",
#      saved unshrunk as a seed, the run goes on in a fresh child, and the seed replays the crash
#      in a fresh process (exit 1);
#   2. the false-alarm soak: the megakernel under the nightly profile, seed after seed
#      (scripts/soak.sh), until TARGET judged runs or LIMIT seconds. WORKERS xdist workers
#      (default 1: with 2 the last two-H200 run hung while bringing up its workers; see soak.sh).
# Knobs: OUT (logs and reports), STEPS (crash,soak), TARGET (10000), LIMIT (420), SEEDS,
# MEGAKERNEL_CACHE (compiled kernels; a carried folder makes a fresh machine skip compiling).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
W=/tmp/k3soak; rm -rf $W; mkdir -p $W
export PYTHONPATH=$PWD:$PWD/tests/k3diff${PYTHONPATH:+:$PYTHONPATH}
MK=megakernel.backend:MegakernelBackend
STEPS=${STEPS:-crash,soak}
NGPU=$(nvidia-smi -L | wc -l)
has() { [[ ",$STEPS," == *",$1,"* ]]; }
say() { echo; echo "=== $*"; }

if has crash; then
  for C in CudaIllegalAddress CudaDeviceAssert; do
    say "crash demo: crashing_candidates:$C (bad on batch 3), moe ci suite on GPU 0"
    CUDA_VISIBLE_DEVICES=0 timeout -s INT 240 python -m pytest -p k3diff.plugin tests/differential --k3diff \
      --k3diff-backend crashing_candidates:$C -k moe --k3diff-profile ci --k3diff-seed 11 \
      --k3diff-save $W/seeds-$C --k3diff-report $OUT/crash-$C.jsonl -q -p no:cacheprovider -p no:randomly 2>&1 \
      | grep -E "crash:|passed|failed|^  *moe|fail " | head -12
    echo "pytest exit ${PIPESTATUS[0]}; seeds saved: $(ls $W/seeds-$C 2>/dev/null | wc -l)"
    for s in $(ls $W/seeds-$C/*.json 2>/dev/null | head -2); do
      CUDA_VISIBLE_DEVICES=0 timeout 120 python -m k3diff.cli replay "$s" --backend crashing_candidates:$C \
        --device cuda 2>&1 | head -2
      echo "replay exit ${PIPESTATUS[0]} ($(python -c "import json,sys; print('batch', json.load(open(sys.argv[1]))['case']['batch'])" "$s"))"
    done
    cp -r $W/seeds-$C "$OUT/" 2>/dev/null
  done
fi

if has soak; then
  say "soak: $MK, nightly profile, ${WORKERS:-1} worker(s) on $NGPU GPU(s), until ${TARGET:-10000} runs or ${LIMIT:-420} s"
  LIMIT=${LIMIT:-420} WORKERS=${WORKERS:-1} SEEDS=${SEEDS:-$(seq 11 11 550)} \
    bash scripts/soak.sh "$OUT/soak" "${TARGET:-10000}" "$MK" -- -k moe
fi
