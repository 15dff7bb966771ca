#!/usr/bin/env bash
# call 89 (twenty-second session): the KDA core's persistent launch (k_kda_core.py `walk`: each
# CTA walks (token, head, split) items, the next item's state rows loaded while this one's rule
# runs) against the one-item-a-CTA launch and FLA's fused recurrent KDA, each alone in one run,
# bits checked against the default split (tune_attn); then the KDA step (bench_kda, FLA's column).
# Two calls back to back on one warm machine: first, carrying [".whl"] (bash scripts/pack_adapters.sh),
#     PART=install bash scripts/gpu_calls/call89.sh
# then within 30 s, carrying [".device", ".gpu"] (bash scripts/gpu_calls/build_cache.sh):
#     source .device/env.sh && bash scripts/gpu_calls/call89.sh
set -uo pipefail
if [ "${PART:-check}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=8 cmd A_tune_kda 150 python3 -m megakernel.tools.tune_attn --splits 4,16,4p4,4p5,8p4,8p7,2p3 \
  --batches 1,8,16,64 --hgs '' --merges '' --lat-merges ''
TAIL=8 cmd B_tune_kda_again 100 python3 -m megakernel.tools.tune_attn --splits 4,4p4,4p5,8p7,2p3 \
  --batches 64,8 --hgs '' --merges '' --lat-merges ''
TAIL=12 cmd C_bench_kda 90 python3 -m megakernel.tools.bench_kda --dims full
finish
