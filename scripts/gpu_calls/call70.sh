#!/usr/bin/env bash
# Ran once (2026-12-05, call 70, an H100; docs/verdicts.md). Since 291d48f remat is the TMA default and
# mla_ksplit names the old kernel `tma_held`, so step D here asks for a variant that is gone.
# call 70 (written in the fifteenth session, which had no GPU; not yet run): the two builds made
# on the CPU to cut spills, checked for bits and timed against what they would replace.
#   1. the persistent launch with lean GEMV tasks (tune_persistent `lean`: U = 1, the K loop
#      rolled): its bits against the 11 launches (test_mk_gpu.py), memcheck, then the one launch
#      default / lean / lean at 2 and 1 CTAs a SM (U = 2, 4) against the fork-join at batch 1, 8,
#      64, both formats (tune_persistent checks each build's bits before timing it);
#   2. the TMA attention with the query's descriptors recomputed per tile (mla_ksplit
#      `tma_remat`): its bits against `tma` and its time beside it;
#   3. the lat-only merge, 32 x 8 (the default) against 128 x 4 at batch 64 (the same bits; 1-11%
#      faster there in calls 62 and 66): a third run before it becomes the batch > 8 variant.
# Before: bash scripts/gpu_calls/build_cache.sh (CPU, ~4 min) for .gpu/mkc.tgz; carry
# [".device", ".gpu"]; command: source .device/env.sh && bash scripts/gpu_calls/call70.sh
# Timings first, memcheck last (a default changes only after the whole check anyway).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
GPU=tests/megakernel/test_mk_gpu.py
TAIL=8 cmd A_persistent_bits 120 python3 -m pytest -q -p no:cacheprovider $GPU -k persistent
TAIL=12 cmd C_tune_persistent 260 python3 -m megakernel.tools.tune_persistent \
  --settings default,lean,lean2/SM,lean1/SM --batches 1,8,64
TAIL=10 cmd D_attn_remat 120 python3 -m megakernel.tools.mla_ksplit \
  --variants unsplit,tma,tma_remat --rows 1x1024,8x8192,64x8192,64x32768
TAIL=10 cmd E_merge 60 python3 -m megakernel.tools.tune_attn --batches '' --hgs '' --merges '' \
  --lat-merges v32x8,v128x4 \
  --lat-rows 8x32768,64x1024,64x8192,64x32768
TAIL=8 cmd B_lean_memcheck 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
  python3 -m pytest -q -p no:cacheprovider $GPU -k "lean and 73 and mxfp4"
finish
