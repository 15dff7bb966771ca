#!/usr/bin/env bash
# call 9: MLA's attention with ksplit and 2 head tiles per CTA made the default; the stages it
# feeds (mla, layer) judged again at both presets, fresh seeds, and the attention alone timed
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-200}
ci A_ml_def_83001 100 -k "mla or layer" --k3diff-seed 83001
ci B_ml_full_84001 90 -k "mla or layer" --k3diff-preset full --k3diff-seed 84001
finish
