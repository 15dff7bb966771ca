#!/usr/bin/env bash
# call 84 (twentieth session), on 2b01331's kernels right after call 83: the nightly profile's
# shards of seed 97104 while the budget lasts (it ran shards 1 and 2 of 8; the second met two
# out-of-memory crashes of full-dims bf16 layer cases on the 80 GB H100, since the machine's line,
# k3diff/judge.py). SHARDS picks which of the 8 to run.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560}
nightly_shards ${SEED:-97104} 8 ${SHARDS:-1 2 3 4 5 6 7 8}
finish
