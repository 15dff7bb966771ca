#!/usr/bin/env bash
# call 25 (ninth session): ep_time with the one-GPU step, the bytes per step and the link's
# bandwidth side by side (the two-GPU bench of issue 34, run here on one H200).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=8 END=${END:-200}
TAIL=30 cmd A_ep_time $(left) python3 -m megakernel.tools.ep_time --ranks 2 --dims full,small --batches 1,8,64 --steps 5
finish
