#!/usr/bin/env bash
# call 85 (written in the twentieth session for the next GPU, an H200 if one is lent): the down
# launch's table by card (k_expert_mma.DOWN_BY_CARD) judged where it was not measured. tune_mma
# prints the whole MXFP4 step under "DOWN everywhere" (what the H200 runs) and "H100's table" side
# by side; an H200 row goes into DOWN_BY_CARD only on a gain there. Then the bits and the verdict on
# bd3ab30's selection code (its first GPU run): the GPU tests, the ci profile at both presets,
# and the nightly shards of seed 97104 that call 84 did not reach (3-8: the MoE's among them). The
# records now carry each bf16 tensor's L2 ratio to the baseline (`l2`, reported only): count.py's
# jsonl and scripts/l2_probe.py --device cuda (the TF32 control too) are its first GPU figures.
# Before it: bash scripts/gpu_calls/build_cache.sh, ../shared/device/cutedsl-bundle; carry
# [".device", ".gpu"].
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
TAIL=8 cmd A_tests 120 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py -k "mxfp4 or down_variants"
TAIL=45 cmd B_tune_mma 120 python3 -m megakernel.tools.tune_mma --T 1,8,16,32,64
TAIL=8 cmd C_bench 120 python3 -m megakernel bench --configs full --no-compile
ci D_ci_full_97105 200 --k3diff-preset full --k3diff-seed 97105
ci E_ci_default_97106 160 --k3diff-seed 97106
TAIL=22 cmd F_l2_probe 120 python3 scripts/l2_probe.py --device cuda
nightly_shards 97104 8 3 4 5 6 7 8
finish
