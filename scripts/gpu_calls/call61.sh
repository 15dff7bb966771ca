#!/usr/bin/env bash
# call 61 (thirteenth session, not run: no device time left): the whole MLA check for making
# MlaAttnTMA(desync=True) the default (set it first, rebuild .gpu/mkc.tgz): the
# attention alone (the same bits as the cp.async one, float64 error, time), the MLA GPU tests,
# memcheck over both attentions, ci's MLA and layer cases at the full preset, the step bench.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-470}
TAIL=14 cmd A_ksplit 60 python3 -m megakernel.tools.mla_ksplit --rows 1x200,3x1000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants unsplit,wgmma,tma,tma_desync
TAIL=8 cmd B_mla_tests 130 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py
TAIL=8 cmd C_memcheck 70 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m megakernel.tools.mla_ksplit --rows 3x3000,2x300 --variants unsplit,wgmma,tma,tma_desync
ci D_ci_mla_layer_99013 170 -k "mla or layer" --k3diff-seed 99013 --k3diff-preset full
TAIL=12 cmd E_bench_mla $(left) python3 -m megakernel.tools.bench_mla --dims full --batches 1,8,64 --lens 1024,8192,32768
finish
