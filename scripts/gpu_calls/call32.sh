#!/usr/bin/env bash
# call 32 (tenth session, right after call 31 on the warm machine): issue 31's benches on the tree
# with the wgmma GEMVs at batch > 8 (no FlashInfer / FLA columns: they need call 15's adapter install)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-450}
TAIL=12 cmd A_bench_kda 80 python3 -m megakernel.tools.bench_kda --dims full
TAIL=20 cmd B_bench_moe 110 python3 -m megakernel bench --no-compile
TAIL=30 cmd C_bench_layer 120 python3 scripts/bench_layer.py
TAIL=30 cmd D_bench_mla $(left) python3 -m megakernel.tools.bench_mla --dims full
finish
