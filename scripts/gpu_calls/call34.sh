#!/usr/bin/env bash
# call 34 (tenth session): the fact the batch > 8 GEMVs' default rests on, as a test of the suite
# (tests/megakernel/test_mk_gemv_gpu.py: wgmma and mma.sync bit for bit on every GEMV shape of both
# presets, at each wgmma width), and the steps side by side with those GEMVs on mma.sync
# (config.Gemv.wgmma=False; the benches' new column) in one run each.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=30 cmd A_gemv_bits 100 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gemv_gpu.py
TAIL=8 cmd B_bench_kda 40 python3 -m megakernel.tools.bench_kda --dims full --batches 16,64
TAIL=12 cmd C_bench_mla 50 python3 -m megakernel.tools.bench_mla --dims full --batches 64 --lens 1024,32768
TAIL=16 cmd D_bench_moe $(left) python3 -m megakernel bench --no-compile --configs full --batches 64
finish
