#!/usr/bin/env bash
# call 14 (for the next session; no device time was left in the sixth): the GPU check of 2bb22d8's
# rule change (KDA's f32 state and readout at rtol 4, k3diff/budgets.py _F32_STATE) and of its new
# false-alarm control gemm_across_midpoints: the near-edge case of nightly 94001 re-judged, the
# whole mutants run on cuda (every control, the new one included), KDA's margins at full dims, the
# ci profile at a fresh seed per preset, then nightly 94001's shards 5-8 (1-4 ran in call 12) while
# time is left (SHARDS="..." bash scripts/gpu_calls/call14.sh to pick them)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
TAIL=6 cmd A_state_edge 30 python3 scripts/gpu_calls/state_edge.py 0
TAIL=60 cmd B_mutants_cuda 200 python3 -m k3diff.cli mutants --device cuda
TAIL=12 cmd C_kda_margins 40 python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages kda
ci D_def_95005 150 --k3diff-seed 95005
ci E_full_96004 150 --k3diff-preset full --k3diff-seed 96004
nightly_shards 94001 8 ${SHARDS:-5 6 7 8}
finish
