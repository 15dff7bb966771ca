#!/usr/bin/env bash
# call 74 (seventeenth session), right after call 73 on the same H200: ci's MoE and KDA cases at
# the full preset on 291d48f's plugin (its exit rule; those kernels unchanged), then the KDA, MoE
# and layer benches on the H200 (call 71's ran on an H100).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-330}
TAIL=10 cmd C_bench_kda 40 python3 -m megakernel.tools.bench_kda --dims full
TAIL=14 cmd D_bench_moe 90 python3 -m megakernel bench --configs full --no-compile
TAIL=12 cmd E_bench_layer 40 python3 scripts/bench_layer.py --no-compile
ci F_ci_moe_kda_99017 $(left) -k "moe or kda" --k3diff-seed 99017 --k3diff-preset full
finish
