#!/usr/bin/env bash
# call 20 (eighth session): the first GPU run of the two pieces written without a GPU (issue 31):
# peek.py's ready-ticket scheduler beside the default one-launch scheduler and the fork-join, and
# k_l2_prefetch.py in the setting it was written for. Cache built on the CPU with
#     MEGAKERNEL_CACHE=/tmp/mkc python -m megakernel compile --arch sm_90a --dims full --experimental
# then, carrying [".device", ".gpu"]: bash scripts/gpu_calls/call20.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=20 cmd A_prefetch 90 python3 -m megakernel.experimental.measure prefetch --chain 40 --mb 8,24,48
TAIL=20 cmd B_peek $(left) python3 -m megakernel.experimental.measure peek
finish
