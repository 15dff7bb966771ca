#!/usr/bin/env bash
# call 76 (written in the eighteenth session, no GPU lent then): the MXFP4 experts reading the rot
# layout (config.Moe.mx_rot, megakernel/mx_layout.py: 12 decode instructions per u32 of weights
# instead of 17; SASS on the CPU: up 187.2 -> 143.2, down 150.8 -> 109.4 warp instructions per KB).
# First the bits (GPU tests: the rot layout equals the stored one, fork-join and one launch,
# memcheck over them), then the time side by side: tune_mma (each expert launch alone, the rot
# row last), the megakernel bench's MXFP4 rows ("rot us" column), tune_persistent's rot builds.
# The default changes only if these show a gain; then the ci profile is owed on the new default.
# Before it, on the CPU: bash scripts/gpu_calls/build_cache.sh (the rot kernels and the one
# launch's rot builds into .gpu/mkc.tgz) and ../shared/device/cutedsl-bundle; carry [".device", ".gpu"].
# (A record: it ran at 24c4a51 with the rot layout in the tree; ncu_experts then took a layout
# suffix, down_ocp / down_rot. The rot layout is deleted since, so its lanes no longer run as written.)
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=8 cmd A_rot_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "rot or mxfp4"
TAIL=8 cmd B_rot_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m pytest -q -x \
  -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "rot_layout and fork"
TAIL=16 cmd C_tune_mma 90 python3 -m megakernel.tools.tune_mma
TAIL=8 cmd D_bench_mxfp4 110 python3 -m megakernel bench --configs full --formats mxfp4 --no-compile
TAIL=8 cmd E_persistent_rot 120 python3 -m megakernel.tools.tune_persistent --formats mxfp4 \
  --batches 1,8,64 --settings default,rot,lean1/SM,lean1/SM+rot
finish
