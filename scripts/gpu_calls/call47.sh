#!/usr/bin/env bash
# call 47 (twelfth session), on 330e92d's tree: memcheck over the new batch <= 8 GEMV variants,
# the MoE and layer benches for the closing tables, then another ci seed while time is left.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-480}
TAIL=8 cmd A_memcheck_gemv 90 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.tune_gemv \
  --preset small --own-ks --batches 1,8 --shapes mla_a,kda_in,mla_out,kda_out --U 1,2 --RTKS 1x4 --PIPE 1 --R 2
TAIL=12 cmd B_bench_moe 150 python3 -m megakernel bench --configs full --no-compile
TAIL=12 cmd C_bench_layer 150 python3 scripts/bench_layer.py --no-compile
ci D_ci_99011 $(left) --k3diff-seed 99011
finish
