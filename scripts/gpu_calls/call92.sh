#!/usr/bin/env bash
# call 92 (written in the twenty-second session, not run: no device time left): the last shard of
# nightly seed 97104 (8/8) on be7df64's kernels (8b42660's). Carry [".device", ".gpu"]:
#     source .device/env.sh && bash scripts/gpu_calls/call92.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
PROFILE=nightly ci N_97104_8of8 $(left) --k3diff-seed 97104 --k3diff-shard 8/8
finish
