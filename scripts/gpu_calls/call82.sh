#!/usr/bin/env bash
# call 82 (twentieth session): the down launch's variants as calls 79-80 settled them (a 4-stage
# ring up to WIDE_T = 8 tokens, 8 warps a CTA above; call 80's U = 3 below 8 did not repeat its
# call-79 time), and the invariance check sized like a case (k3diff/invariance.py: call 80's full
# preset run on the H100 ran out of memory drawing a bf16 W2 there). The bits (GPU tests, memcheck),
# the time side by side (tune_mma with the step against PREV_DOWN, the megakernel bench, the MXFP4
# layer bench), then the verdict: the ci profile at the full preset on call 80's seed 97102 and
# at the default preset on a fresh one. Before it: bash scripts/gpu_calls/build_cache.sh and
# ../shared/device/cutedsl-bundle; carry [".device", ".gpu"]. Call 80 ran these lanes (call80.sh).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=8 cmd A_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "mxfp4 or down_variants"
TAIL=8 cmd B_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -x \
  -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "down_variants and (${MEMCHECK_T:-1 or 9})"
TAIL=45 cmd C_tune_mma 120 python3 -m megakernel.tools.tune_mma --T 1,8,16,32,64
ci D_ci_full_${SEED_FULL:=97102} ${FULL_S:-200} --k3diff-preset full --k3diff-seed $SEED_FULL
TAIL=8 cmd E_bench 120 python3 -m megakernel bench --configs full --no-compile
ci F_ci_default_${SEED_DEFAULT:=97103} 160 --k3diff-seed $SEED_DEFAULT
TAIL=10 cmd G_bench_layer_mx $(left) python3 scripts/bench_layer.py --no-compile --format mxfp4
finish
