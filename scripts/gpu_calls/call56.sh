#!/usr/bin/env bash
# call 56 (thirteenth session): the TMA probe (the shared image of a tile against the swizzle
# formula; k_mla_attn_tma.py at small rows in a child with a deadline); if the attention agrees,
# its timing beside k_mla_attn_wg.py.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-240}
TAIL=30 cmd A_probe 110 python3 scripts/gpu_calls/tma_probe.py 1x200,1x255,2x3000,1x8192,3x1000
if grep -q "within its error bound: ok" $R/A_probe.log; then
  TAIL=14 cmd B_ksplit 110 python3 -m megakernel.tools.mla_ksplit --rows 1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
    --variants unsplit,wgmma,tma
fi
finish
