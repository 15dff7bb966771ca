#!/usr/bin/env bash
# call 3 (2026-12-02, third session): one lane, nothing beside it (call 2's OOMs came from lanes
# sharing the GPU). First the whole default ci run of every stage from a cold kernel cache (issue 28's
# "within 10 minutes cold"), then moe+layer at the seeds call 2 could not run cleanly.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-565}
ci A_all_def_71002 420 --k3diff-seed 71002
ci B_def_71003 200 -k "moe or layer" --k3diff-seed 71003
ci C_full_72002 200 -k "moe or layer" --k3diff-preset full --k3diff-seed 72002
finish
