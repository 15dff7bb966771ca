#!/usr/bin/env bash
# call 88 (written in the twenty-first session for the next GPU, an H200 if one is lent): the MXFP4
# bench rows' order effect traced and the nightly shards left. The bench now logs the card's
# temperature, SM clock and power after each row: the whole bench (bf16 rows, then MXFP4), then the
# MXFP4 rows alone, side by side in one call (calls 85 and 87 on an H100: 308.6 vs 256.4 us at
# batch 1). On an H200, tune_mma prints the step under both down tables ("DOWN everywhere" is what
# the H200 runs); an H200 row goes into k_expert_mma.DOWN_BY_CARD only on a gain there. Then the
# ci profile under the whole-tensor rule on that card, and nightly seed 97104 shards 5-8.
# Before it: bash scripts/gpu_calls/build_cache.sh, ../shared/device/cutedsl-bundle; carry
# [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=14 cmd A_bench_all 120 python3 -m megakernel bench --configs full --no-compile
TAIL=8 cmd B_bench_mxfp4 60 python3 -m megakernel bench --configs full --formats mxfp4 --no-compile
TAIL=12 cmd C_tune_mma 60 python3 -m megakernel.tools.tune_mma --T 1,8,64
ci D_ci_default_97109 130 --k3diff-seed 97109
nightly_shards 97104 8 5 6 7 8
finish
