#!/usr/bin/env bash
# call 35 (tenth session, the last 200 s of device time): after the MoE's GEMVs went back to
# mma.sync at batch > 8 (call 34: wgmma slowed the MXFP4 fork-join; every GEMV gives the same bits
# on either instruction, test_mk_gemv_gpu.py), the ci profile at the full preset on a fresh seed.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-95}
ci A_ci_full_99003 95 --k3diff-seed 99003 --k3diff-preset full
finish
