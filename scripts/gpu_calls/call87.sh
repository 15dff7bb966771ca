#!/usr/bin/env bash
# call 87 (twenty-first session): a fuzz run past a case too large for the card
# (k3diff.session.skip_too_large). Call 86's ci full preset at seed 97105 ended in a Hypothesis
# FlakyFailure traceback on an H100: a full-dims bf16 layer case out of memory twice, then held on
# the replay. The same run again: the case skipped with its line, every other case judged, exit 11.
# First the MoE bench in MXFP4 alone: is its batch-1 row (308 us in calls 82 and 85, after the bf16
# rows, while tune_mma's step reads 265-267) the kernels' or the order's? Then the nightly shards
# of seed 97104 that calls 84 and 85 did not reach (4-8: the MoE's among them).
# Before it: bash scripts/gpu_calls/build_cache.sh, ../shared/device/cutedsl-bundle; carry
# [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=10 cmd A_bench_mxfp4 90 python3 -m megakernel bench --configs full --formats mxfp4 --no-compile
ci B_ci_full_97105 260 --k3diff-preset full --k3diff-seed 97105
nightly_shards 97104 8 4 5 6 7 8
finish
