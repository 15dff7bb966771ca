#!/usr/bin/env bash
# call 81 (twentieth session): issue 31's bench tables on the kernels of call 80, with the
# FlashInfer MLA and FLA KDA columns. Two runs on one warm machine: first, carrying [".whl"]
# (scripts/pack_adapters.sh), `bash scripts/gpu_calls/install_adapters.sh` puts the adapters in
# .site/; then, carrying [".device", ".gpu"], this script: bench_mla (FlashInfer beside the
# attention + merge), bench_kda (FLA's fused recurrent KDA beside the core), bench_layer both
# layer kinds in both formats.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-540} PYTHONPATH=$PWD/.site:$PYTHONPATH
TAIL=16 cmd A_bench_mla 200 python3 -m megakernel.tools.bench_mla --dims full
TAIL=12 cmd B_bench_kda 90 python3 -m megakernel.tools.bench_kda --dims full
TAIL=12 cmd C_bench_layer_mx 120 python3 scripts/bench_layer.py --no-compile --format mxfp4
TAIL=12 cmd D_bench_layer_bf16 $(left) python3 scripts/bench_layer.py --no-compile
finish
