#!/usr/bin/env bash
# call 71 (sixteenth session): the closing tables on the judged default kernels (PTX of 3b80092's
# kernels; see docs/verdicts.md): the MoE, MLA, KDA and layer benches side by side, each in one run.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-540}
TAIL=14 cmd B_bench_mla 90 python3 -m megakernel.tools.bench_mla --dims full
TAIL=10 cmd C_bench_kda 60 python3 -m megakernel.tools.bench_kda --dims full
TAIL=14 cmd D_bench_moe 150 python3 -m megakernel bench --configs full --no-compile
TAIL=12 cmd E_bench_layer $(left) python3 scripts/bench_layer.py --no-compile
finish
