#!/usr/bin/env bash
# call 89 (twenty-second session): the KDA core's persistent launch (k_kda_core.py `walk`: each
# CTA walks (token, head, split) items, the next item's state rows loaded while this one's rule
# runs) against the one-item-a-CTA launch and FLA's fused recurrent KDA, each alone in one run,
# bits checked against the default split (tune_attn); the KDA step with FLA's column (bench_kda).
# (The persistent launch and tune_attn's SpN labels were deleted after this call, no gain:
# 3e2dba4 is the tree it ran on.) Then call 88's lanes (not run: no machine): the MoE bench whole and MXFP4 alone with the card's
# state per row, tune_mma under both down tables, the ci profile.
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
TAIL=8 cmd A_tune_kda 130 python3 -m megakernel.tools.tune_attn --splits 4,16,4p4,4p5,8p4,8p7,2p3 \
  --batches 1,8,64 --hgs '' --merges '' --lat-merges ''
TAIL=12 cmd B_bench_kda 80 python3 -m megakernel.tools.bench_kda --dims full
TAIL=14 cmd C_bench_all 110 python3 -m megakernel bench --configs full --no-compile
TAIL=8 cmd D_bench_mxfp4 50 python3 -m megakernel bench --configs full --formats mxfp4 --no-compile
TAIL=12 cmd E_tune_mma 60 python3 -m megakernel.tools.tune_mma --T 1,8,64
ci F_ci_default_97109 $(left) --k3diff-seed 97109
finish
