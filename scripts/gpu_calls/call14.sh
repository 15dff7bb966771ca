#!/usr/bin/env bash
# call 14 (for the next session; no device time was left in the sixth): KDA's f32 state and readout at rtol 4 (k3diff/budgets.py _F32_STATE) and the
# new false-alarm control gemm_across_midpoints: the near-edge case of nightly 94001 re-judged, the
# KDA mutants and the controls that reach KDA on the GPU, KDA's margins at full dims
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-140}
TAIL=6 cmd A_state_edge 25 python3 scripts/gpu_calls/state_edge.py 0
TAIL=20 cmd B_kda_mutants 70 python3 -m k3diff.cli mutants --device cuda \
  --only kda_delta_rule_one_chunk_short,gemm_one_chunk_short,kda_state_in_bf16,f32_outputs_rounded_to_bf16,kda_decay_on_value_axis,kda_beta_skipped \
  --controls gemm_across_midpoints,gemm_tf32,fma,mul_then_add
TAIL=12 cmd C_kda_margins $(left) python3 -m k3diff.tools.margins --preset full --device cuda --backend $MK --batch 1,64 --stages kda
finish
