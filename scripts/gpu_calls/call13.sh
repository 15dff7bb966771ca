#!/usr/bin/env bash
# call 13 (sixth session): issue 28's "speed to match": the whole ci profile from a cold kernel cache
# (scripts/gpu_ci_time.sh, seed 95004), then the near-edge state of nightly 94001 re-judged
# (state_edge.py: the megakernel and torch-blocked on that case and its neighbours)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-470}
K3DIFF_SEED=95004 OUT=$R/cold TAIL=30 cmd A_cold_ci_95004 380 bash scripts/gpu_ci_time.sh
TAIL=60 cmd B_state_edge $(left) python3 scripts/gpu_calls/state_edge.py 10
finish
