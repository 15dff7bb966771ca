#!/usr/bin/env bash
# call 24 (ninth session): the watchdog's root (12473e1) on the GPU; the whole ci profile on the
# final tree; megakernel-ep on 3 ranks with the full preset through the IPC exchange; ep_time's
# teardown. Kernel cache built on the CPU first (call18.sh says how).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=8 END=${END:-560}
EP=megakernel.backend:MegakernelEPBackend
TAIL=14 cmd A_persistent 100 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "persistent"
ci B_ci_98001 200 --k3diff-seed 98001
BACKEND=$EP ci C_ep_ci_3ranks_full 170 -k moe --k3diff-ranks 3 --k3diff-seed 98003 --k3diff-preset full
TAIL=16 cmd D_ep_time $(left) python3 -m megakernel.tools.ep_time --ranks 2 --dims full
finish
