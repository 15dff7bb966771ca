#!/usr/bin/env bash
# call 43 (twelfth session): programmatic dependent launch (megakernel/pdl.py). The bits with PDL
# on and off (every step, graph replays), the launch tests (fast call included), then the MLA and
# KDA step benches with the other PDL setting as a column measured in the same run.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=14 cmd A_pdl_tests 200 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_pdl_gpu.py tests/megakernel/test_mk_gpu.py
TAIL=12 cmd B_bench_mla 170 python3 -m megakernel.tools.bench_mla --dims full --lens 1024,32768
TAIL=8 cmd C_bench_kda $(left) python3 -m megakernel.tools.bench_kda --dims full
finish
