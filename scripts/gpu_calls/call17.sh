#!/usr/bin/env bash
# call 17 (for the next session; written in the seventh, which had no device time left): issue 34's
# megakernel-ep on ranks sharing one H200 (megakernel/ep.py: gloo through host copies), and the
# default path re-checked after launch_streams.py's refactor (expert_launches; the same kernels in
# the same order, checked on the CPU against the old launches()). Every megakernel/ source change
# renames every stored kernel (kernel_store.py), so build the cache on the CPU first:
#     MEGAKERNEL_CACHE=/tmp/mkc python -m megakernel compile --arch sm_90a --dims full,small
#     mkdir -p .gpu && tar czf .gpu/mkc.tgz -C /tmp/mkc .
# then, carrying [".device", ".gpu"]: bash scripts/gpu_calls/call17.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-575}
TAIL=30 cmd A_ep_gpu_tests 200 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_ep_gpu.py
BACKEND=megakernel.backend:MegakernelEPBackend ci B_ep_ci_2ranks 150 -k moe --k3diff-ranks 2 --k3diff-seed 97001
BACKEND=megakernel.backend:MegakernelEPBackend ci C_ep_ci_3ranks 120 -k moe --k3diff-ranks 3 --k3diff-seed 97002 --k3diff-preset full
TAIL=20 cmd D_mk_gpu_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py
ci E_def_95008 100 --k3diff-seed 95008
finish
