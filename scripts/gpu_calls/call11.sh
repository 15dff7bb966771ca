#!/usr/bin/env bash
# call 11 (sixth session): issue 28's verdicts on the kernels of 720b777 / 6bcc3cc: the ci profile at
# the default and the full preset, three fresh seeds each, the GPU mutants (false-alarm and mutation
# score), then nightly shards of seed 94001 while time is left
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
for s in 1 2 3; do
  ci A_def_9500$s 150 --k3diff-seed 9500$s
  ci B_full_9600$s 150 --k3diff-preset full --k3diff-seed 9600$s
done
TAIL=40 cmd C_mutants_cuda 200 python3 -m k3diff.cli mutants --device cuda
nightly_shards 94001 8 ${SHARDS:-1 2 3 4 5 6 7 8}
finish
