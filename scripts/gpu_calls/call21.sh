#!/usr/bin/env bash
# call 21 (eighth session, right after call 20 on the warm machine): issue 34's megakernel-ep ci
# lanes again with more time (call 19 cut them at 100 s). Carrying [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-320}
EP=megakernel.backend:MegakernelEPBackend
BACKEND=$EP ci D2_ep_ci_2ranks 230 -k moe --k3diff-ranks 2 --k3diff-seed 97001
BACKEND=$EP ci E_ep_ci_3ranks_full $(left) -k moe --k3diff-ranks 3 --k3diff-seed 97002 --k3diff-preset full
finish
