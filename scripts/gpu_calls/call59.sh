#!/usr/bin/env bash
# call 59 (thirteenth session): FlashInfer's MLA decode beside the step on 56595a0's kernels (the
# TMA attention), call 49's method: first, carrying [".whl"], `PART=install bash
# scripts/gpu_calls/call59.sh`; then within 30 s, carrying [".device", ".gpu"], `bash
# scripts/gpu_calls/call59.sh`. Then the layer bench with the time left.
set -uo pipefail
if [ "${PART:-bench}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-260} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=12 cmd A_bench_mla 200 python3 -m megakernel.tools.bench_mla --dims full
TAIL=10 cmd B_bench_layer $(left) python3 scripts/bench_layer.py --no-compile
finish
