#!/usr/bin/env bash
# call 44 (twelfth session): the MoE and the layer benches with the other PDL setting as a column
# measured in the same run (megakernel/pdl.py), and memcheck over PDL-launched steps.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=30 cmd A_bench_moe 230 python3 -m megakernel bench --configs full --no-compile
TAIL=12 cmd B_bench_layer 200 python3 scripts/bench_layer.py --no-compile
TAIL=8 cmd C_memcheck_pdl $(left) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_pdl_gpu.py -k "layer or moe and T1"
finish
