#!/usr/bin/env bash
# call 35 (written in the tenth session, not yet run: the 200 s left could not start a machine):
# the whole check on the final tree, where the MoE's GEMVs went back to mma.sync at batch > 8
# (6c3ee00; call 34: wgmma slowed the MXFP4 fork-join, and every GEMV gives the same bits on
# either instruction, test_mk_gemv_gpu.py). Build the kernel cache on the CPU first:
#   rm -rf /tmp/mkc; MEGAKERNEL_CACHE=/tmp/mkc python -m megakernel compile --arch sm_90a --dims full,small
#   tar czf .gpu/mkc.tgz -C /tmp/mkc .
# then carry [".device", ".gpu"]: bash scripts/gpu_calls/call35.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-540}
TAIL=14 cmd A_mk_gpu 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py tests/megakernel/test_mk_gemv_gpu.py
ci B_ci_full_99003 200 --k3diff-seed 99003 --k3diff-preset full
ci C_ci_99004 150 --k3diff-seed 99004
finish
