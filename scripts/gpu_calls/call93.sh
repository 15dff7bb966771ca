#!/usr/bin/env bash
# call 93 (written in the twenty-second session for the next GPU): the one-warp KDA core
# (megakernel/experimental/k_kda_core_warp.py, compiled on the CPU, never run) beside the shipped
# core and FLA's fused recurrent KDA, each alone, twice, its bits against the shipped core's
# (tune_attn's same-bits column: readout, gates and state); the MoE bench's order effect under 8
# and 32 hardware queues (below); last, compute-sanitizer memcheck over the one-warp core.
# If it is faster at batch 8 and 64 in both runs, it earns a place in k_kda_core.py's variant()
# and then the whole check (ci, bench_kda) on the new default; if not, it is deleted.
# Two calls back to back on one warm machine: first, carrying [".whl"] (bash scripts/pack_adapters.sh),
#     PART=install bash scripts/gpu_calls/call93.sh
# then within 30 s, carrying [".device", ".gpu"] (bash scripts/gpu_calls/build_cache.sh):
#     source .device/env.sh && bash scripts/gpu_calls/call93.sh
set -uo pipefail
if [ "${PART:-check}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=8 cmd A_tune_kda 120 python3 -m megakernel.tools.tune_attn --splits 4,8,w16,w32 --batches 1,8,64 \
  --hgs '' --merges '' --lat-merges ''
TAIL=8 cmd B_tune_kda_again 120 python3 -m megakernel.tools.tune_attn --splits 4,8,w16,w32 --batches 64,8,1 \
  --hgs '' --merges '' --lat-merges ''
# the MoE bench's order effect: order_probe.py (call 91: the first fork-join graph captured after a
# 59 GiB buffer was freed ran 308.6 us, the rest ~266) and the whole bench as the closing tables
# run it, each with the driver's 8 hardware queues and with 32 (a fork-join graph whose two
# branches land on one queue runs them one after the other: the suspect after calls 89 and 91)
TAIL=12 cmd D_order_probe 60 python3 scripts/gpu_calls/order_probe.py
TAIL=12 cmd E_order_probe_32q 60 env CUDA_DEVICE_MAX_CONNECTIONS=32 python3 scripts/gpu_calls/order_probe.py
TAIL=14 cmd F_bench_all 110 python3 -m megakernel bench --configs full --no-compile
TAIL=14 cmd G_bench_all_32q 110 env CUDA_DEVICE_MAX_CONNECTIONS=32 python3 -m megakernel bench --configs full --no-compile
TAIL=12 cmd H_memcheck $(left) compute-sanitizer --tool memcheck python3 -m megakernel.tools.tune_attn \
  --splits 8,w16,w32 --batches 3 --hgs '' --merges '' --lat-merges ''
finish
