#!/usr/bin/env bash
# call 5: after the KDA state-precision rule (state_rules.carried_in_f32) and the GPU-share fix: every
# stage's default ci at a fresh seed, the new mutant on cuda, the margins at full dims alone, then
# the default-preset nightly as two xdist workers sharing the GPU
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-555}
ci A_all_def_75001 200 --k3diff-seed 75001
TAIL=8 cmd B_mutant_state 60 python3 -m k3diff.cli mutants --device cuda --only kda_state_in_bf16,f32_outputs_rounded_to_bf16 --controls none
TAIL=70 cmd C_margins 160 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages moe,mla,kda
OMP_NUM_THREADS=6 PROFILE=nightly ci D_nightly_74002 $(left) --k3diff-seed 74002 -n 2 -p no:randomly
finish
