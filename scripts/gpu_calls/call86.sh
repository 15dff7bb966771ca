#!/usr/bin/env bash
# call 86 (twenty-first session): the whole-tensor rule (k3diff.budgets.L2_RTOL) judged on the GPU.
# The megakernel at the ci profile (default and full presets) and the public kernels the README
# says are judged the same way, FlashInfer's MLA decode and FLA's KDA, now under the L2 rule too;
# scripts/l2_probe.py --device cuda: every false-alarm control passes, MLA's out x 1.01 fails. Two
# calls back to back on one warm machine: first, carrying [".whl"] (bash scripts/pack_adapters.sh),
#     PART=install bash scripts/gpu_calls/call86.sh
# then within 30 s, carrying [".device", ".gpu"] (bash scripts/gpu_calls/build_cache.sh):
#     source .device/env.sh && bash scripts/gpu_calls/call86.sh
set -uo pipefail
if [ "${PART:-check}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570} PYTHONPATH=$PWD/.site:$PYTHONPATH
ci A_ci_default_97107 150 --k3diff-seed 97107
BACKEND=flashinfer ci B_flashinfer_mla_97108 150 -k mla --k3diff-seed 97108
BACKEND=fla ci C_fla_kda_97108 100 -k kda --k3diff-seed 97108
TAIL=22 cmd D_l2_probe 60 python3 scripts/l2_probe.py --device cuda
ci E_ci_full_97105 $(left) --k3diff-preset full --k3diff-seed 97105
finish
