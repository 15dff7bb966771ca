#!/usr/bin/env bash
# call 33 (tenth session): call 31's full-preset ci lane again, to its end (call 31 cut it at 172
# cases while it compiled), on the warm cache call 32 returned; then the layer bench without its torch.compile column (call 32's
# lane ran out of time inside torch.compile's first build).
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-420}
ci A_ci_full_99001 220 --k3diff-seed 99001 --k3diff-preset full
TAIL=30 cmd B_bench_layer $(left) python3 scripts/bench_layer.py --no-compile
finish
