#!/usr/bin/env bash
# call 15 (for the next session): issue 31's bench tables with the FlashInfer column, in two calls
# back to back on one warm machine (the bundle and the adapters' packages do not fit one call's
# 64 MiB together). First, carrying [".whl"] (bash scripts/pack_adapters.sh on the CPU makes it):
#     PART=install bash scripts/gpu_calls/call15.sh
# installs fla-core and flashinfer into .site/ (ignored: a warm machine keeps it). Then, within
# 30 s, carrying [".device", ".gpu"]:
#     bash scripts/gpu_calls/call15.sh
# runs bench_mla (the fi attn / fi step columns), bench_kda (the fla core column), the MoE bench
# and bench_layer, each with a time limit.
set -uo pipefail
if [ "${PART:-bench}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=30 cmd A_bench_mla 240 python3 -m megakernel.tools.bench_mla --dims full
TAIL=12 cmd B_bench_kda 90 python3 -m megakernel.tools.bench_kda --dims full
TAIL=20 cmd C_bench_moe 120 python3 -m megakernel bench --no-compile
TAIL=20 cmd D_bench_layer $(left) python3 scripts/bench_layer.py
finish
