#!/usr/bin/env bash
# call 26 (ninth session): issue 34's bench through k3diff (step_time --ranks): the one-GPU
# megakernel, megakernel-ep and torch-blocked-ep on the same moe cases, side by side.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=8 END=${END:-240}
TAIL=20 cmd A_step_time $(left) python3 -m k3diff.tools.step_time --stage moe --preset full --ranks 2 \
  --batches 1,8,64 --iters 3 --rounds 3 \
  --backends megakernel.backend:MegakernelBackend,megakernel.backend:MegakernelEPBackend,torch-blocked-ep
finish
