#!/usr/bin/env bash
# call 80 (twentieth session): the MXFP4 down launch's variant by batch (k_expert_mma.down_variant:
# U = 3 up to WIDE_T = 8 tokens, 8 warps a CTA above), chosen from call 79's tune_mma on an H100.
# First the bits (GPU tests: every down variant forced at T 1 / 8 / 9 / 64 equals the default,
# batch invariance across the switch, memcheck over them), then the time side by side (tune_mma
# at T 1 / 8 / 16 / 32 / 64 with the step against PREV_DOWN at every batch; the megakernel bench),
# then the verdict on the new kernels: the ci profile, default preset and full preset, every stage.
# Before it: bash scripts/gpu_calls/build_cache.sh, ../shared/device/cutedsl-bundle; carry
# [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
TAIL=8 cmd A_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "mxfp4 or down_variants"
TAIL=8 cmd B_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -x \
  -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "down_variants and (9 or 64)"
TAIL=45 cmd C_tune_mma 120 python3 -m megakernel.tools.tune_mma --T 1,8,16,32,64
ci D_ci_full_97102 130 --k3diff-preset full --k3diff-seed 97102
TAIL=8 cmd E_bench 120 python3 -m megakernel bench --configs full --no-compile
ci F_ci_default_97101 160 --k3diff-seed 97101
finish
