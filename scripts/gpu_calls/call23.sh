#!/usr/bin/env bash
# call 23 (ninth session): issue 32's watchdog (the persistent launch names the wait it gave up
# on) and issue 34's exchange through peer device memory (megakernel/ep_ipc.py), judged and timed
# on one H200. Kernel cache built on the CPU first (scripts/gpu_calls/call18.sh says how).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=8 END=${END:-585}
EP=megakernel.backend:MegakernelEPBackend
TAIL=14 cmd A_persistent 130 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "persistent"
TAIL=30 cmd B_ep_gpu 200 python3 -m pytest -q -p no:cacheprovider -rf tests/megakernel/test_mk_ep_gpu.py
TAIL=40 cmd C_ep_time 140 python3 -m megakernel.tools.ep_time --ranks 2,3 --dims full,small
BACKEND=$EP ci D_ep_ci_2ranks $(left) -k moe --k3diff-ranks 2 --k3diff-seed 98002
finish
