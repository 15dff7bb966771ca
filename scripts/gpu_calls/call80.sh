#!/usr/bin/env bash
# call 80 (twentieth session): the MXFP4 down launch's variant by batch as 79be7ba had it (U = 3 up
# to WIDE_T = 8 tokens, 8 warps a CTA above), chosen from call 79's tune_mma on an H100: the bits
# (GPU tests, memcheck), the time side by side (tune_mma, the megakernel bench), the ci profile at
# the full and default presets. The lanes are call82.sh's, run with these seeds and a 130 s full
# preset lane (which timed out after an out-of-memory crash; docs/verdicts.md); its last lane, the
# MXFP4 layer bench, came in call 82.
MEMCHECK_T="9 or 64" SEED_FULL=97102 FULL_S=130 SEED_DEFAULT=97101 exec bash "$(dirname "$0")/call82.sh"
