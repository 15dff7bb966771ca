#!/usr/bin/env bash
# call 68 (fourteenth session): racecheck over the split attention's walks of many tiles (call
# 66's racecheck lane ran out of time inside mla_ksplit's timing loops): the step once, then the
# attention twice (ncu_attn.py), at 2 x 3000 (8-tile splits) and 64 x 1024 (walks of two
# single-tile splits); then ci's MLA and layer cases at another seed, full preset.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-400}
TAIL=6 cmd A_racecheck_2x3000 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/gpu_calls/ncu_attn.py 2 3000 tma
TAIL=6 cmd B_racecheck_64x1024 100 compute-sanitizer --tool racecheck --error-exitcode 9 python3 scripts/gpu_calls/ncu_attn.py 64 1024 tma
ci C_ci_mla_layer_99015 $(left) -k "mla or layer" --k3diff-seed 99015 --k3diff-preset full
finish
