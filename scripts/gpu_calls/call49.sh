#!/usr/bin/env bash
# call 49 (twelfth session): issue 31's FlashInfer and FLA columns on 560fbf4's kernels, call 40's
# method: first, carrying [".whl"] (scripts/pack_adapters.sh), `PART=install bash
# scripts/gpu_calls/call49.sh`; then within 30 s, carrying [".device", ".gpu"], `bash scripts/gpu_calls/call49.sh`.
set -uo pipefail
if [ "${PART:-bench}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=12 cmd A_bench_mla 220 python3 -m megakernel.tools.bench_mla --dims full
TAIL=8 cmd B_bench_kda $(left) python3 -m megakernel.tools.bench_kda --dims full
finish
