#!/usr/bin/env bash
# calls 40 and 41 (eleventh session): issue 31's FlashInfer and FLA columns, in two calls back to
# back on one warm machine (call 15's method). First, carrying [".whl"] (scripts/pack_adapters.sh):
#     PART=install bash scripts/gpu_calls/call40.sh
# then, within 30 s, carrying [".device", ".gpu"]:
#     bash scripts/gpu_calls/call40.sh
# bench_mla with the default attention and with the wgmma one (MK_MLA_MMA=wg) beside FlashInfer's
# MLA decode, bench_kda beside FLA's fused recurrent KDA.
set -uo pipefail
if [ "${PART:-bench}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=14 cmd A_bench_mla 240 python3 -m megakernel.tools.bench_mla --dims full
TAIL=8 cmd B_bench_mla_wg 110 env MK_MLA_MMA=wg python3 -m megakernel.tools.bench_mla --dims full --batches 8,64 --lens 8192,32768
TAIL=10 cmd C_bench_kda $(left) python3 -m megakernel.tools.bench_kda --dims full
finish
