#!/usr/bin/env bash
# call 77 (nineteenth session): the verdict re-checked on the commit the closing note names, after
# call 76 timed the rot layout. The ci profile on two fresh seeds (the default preset and the full
# one, every stage, batch invariance included), the megakernel bench of both formats at full dims,
# the mutants and controls on the GPU (last run in call 11), and the nightly's MoE shard. Between them
# the bf16 one launch's lean build (call 76 on an H100: MXFP4 lean1/SM ahead of fork-join at T=64).
# In the order of need (the budget left may cut the tail): the ci profile, ncu over the down kernel
# (call78.sh's first two), the mutants, the bench, the nightly shard.
# (A record: it ran at 24c4a51 with the rot layout in the tree; ncu_experts then took a layout
# suffix, down_ocp / down_rot. The rot layout is deleted since, so its lanes no longer run as written.)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-450}
ci A_ci_default_97001 150 --k3diff-seed 97001
ci B_ci_full_97002 150 --k3diff-preset full --k3diff-seed 97002
# then call 78's first two profiles (the down kernel, stored layout and rot) while time is left
ncu_experts 8 down_ocp down_rot
TAIL=40 cmd D_mutants_cuda 200 python3 -m k3diff.cli mutants --device cuda
TAIL=10 cmd C_bench_moe 110 python3 -m megakernel bench --configs full --no-compile
TAIL=6 cmd C2_persistent_bf16 60 python3 -m megakernel.tools.tune_persistent --formats bf16 \
  --batches 1,8,64 --settings default,lean1/SM
nightly_shards 97003 8 8
finish
