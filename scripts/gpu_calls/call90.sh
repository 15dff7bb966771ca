#!/usr/bin/env bash
# call 90 (twenty-second session): the MXFP4 bench rows' order effect traced (order_probe.py:
# call 89 logged the card cool and at full clock before both the slow and the fast batch-1 row,
# so heat is ruled out; memory left by the bf16 rows or their objects is next); bench_mla with
# FlashInfer's column on this tree for the closing tables; nightly seed 97104's shards left.
# Two calls back to back on one warm machine: first, carrying [".whl"] (bash scripts/pack_adapters.sh),
#     PART=install bash scripts/gpu_calls/call90.sh
# then within 30 s, carrying [".device", ".gpu"] (bash scripts/gpu_calls/build_cache.sh):
#     source .device/env.sh && bash scripts/gpu_calls/call90.sh
set -uo pipefail
if [ "${PART:-check}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=20 cmd A_order_probe 170 python3 scripts/gpu_calls/order_probe.py
TAIL=16 cmd B_bench_mla 200 python3 -m megakernel.tools.bench_mla --dims full
nightly_shards 97104 8 5 6 7 8
finish
