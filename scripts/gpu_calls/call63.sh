#!/usr/bin/env bash
# call 63 (fourteenth session): the TMA attention's variants alone (desync, the CTA barrier per
# tile, and desync with tile j + 1's scores issued before tile j's P V is waited for), the same
# bits required; then where desync's time goes: ncu's warp stall reasons and per-instruction
# samples at 64 / 32k and 1 / 8k, exported as CSV for the CPU.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-240}
TAIL=14 cmd A_ksplit 70 python3 -m megakernel.tools.mla_ksplit --rows 2x3000,1x1024,1x8192,1x32768,8x8192,8x32768,64x1024,64x8192,64x32768 \
  --variants wgmma,tma_sync,tma,tma_ovl
mkdir -p $OUT/ncu
for shape in "64 32768" "1 8192"; do
  set -- $shape; n=ncu_${1}_${2}
  TAIL=30 cmd B_$n 60 ncu --kernel-name regex:mla_attn_tma --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section SpeedOfLight \
    -o $OUT/ncu/$n python3 scripts/gpu_calls/ncu_attn.py $1 $2 tma
  [ -f $OUT/ncu/$n.ncu-rep ] && { ncu --import $OUT/ncu/$n.ncu-rep --page raw --csv > $OUT/ncu/$n.raw.csv 2>&1;
    ncu --import $OUT/ncu/$n.ncu-rep --page source --csv --print-source sass > $OUT/ncu/$n.sass.csv 2>&1; rm -f $OUT/ncu/$n.ncu-rep; }
done
finish
