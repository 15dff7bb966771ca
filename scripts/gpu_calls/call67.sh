#!/usr/bin/env bash
# call 67 (fourteenth session), right after call 66 and the adapters' install (PART=install,
# carrying .whl): the rest of the whole check on the same kernels (ci's MoE and KDA cases, a bug
# planted in the split attention's max exchange), then the benches with FlashInfer's column.
set -uo pipefail
if [ "${PART:-check}" = install ]; then
  exec bash "$(dirname "$0")/install_adapters.sh"
fi
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-560} PYTHONPATH=$PWD/.site:$PYTHONPATH
ci F_ci_moe_kda_99014 170 -k "moe or kda" --k3diff-seed 99014 --k3diff-preset full
source scripts/lane.sh
OUT_SAVE=$OUT; OUT=$R
lane_planted mla k_mla_attn_tma.py 's/ld_shared_f32(xm + ((1 - wg) \* HM + hl) \* 4)/ld_shared_f32(xm + (wg * HM + hl) * 4)/' G_mla_tma_planted
OUT=$OUT_SAVE
TAIL=14 cmd H_bench_mla 120 python3 -m megakernel.tools.bench_mla --dims full
TAIL=10 cmd I_bench_layer $(left) python3 scripts/bench_layer.py --no-compile
finish
