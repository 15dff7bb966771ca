#!/usr/bin/env bash
# call 46 (twelfth session): the batch <= 8 GEMV variants of call 45 (gemv._X_PIPED, _OUT_PIPED).
# The steps before / after side by side with their bits, then the whole check on this tree: the
# megakernel's GPU tests, the step benches, ci at the full preset.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-540}
TAIL=20 cmd A_steps_b1 90 python3 scripts/gpu_calls/steps_b1.py
TAIL=14 cmd B_tests 150 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py tests/megakernel/test_mk_mla_gpu.py \
  tests/megakernel/test_mk_side_stream_gpu.py tests/megakernel/test_mk_gemv_gpu.py tests/megakernel/test_mk_kda_gpu.py
TAIL=12 cmd C_bench_mla 60 python3 -m megakernel.tools.bench_mla --dims full
TAIL=8 cmd D_bench_kda 40 python3 -m megakernel.tools.bench_kda --dims full
ci E_ci_full_99010 $(left) --k3diff-seed 99010 --k3diff-preset full
finish
