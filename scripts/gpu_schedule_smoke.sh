#!/usr/bin/env bash
# A five-minute check of the schedule dimension on one GPU without CuTe DSL (the PyTorch candidates
# only), from the project root; logs to $OUT. scripts/gpu_schedule_check.sh is the full run.
#   1. tests/k3diff/test_schedule_gpu.py (graph replay bit for bit, the graph bugs, pressure)
#   2. the planted schedule bugs with and without the dimension, the controls (8 examples a stage)
#   3. cost: the capturable KDA candidate's quick profile with the dimension and without
#   4. k3diff sanitize (memcheck) over one regression seed with torch-blocked
set -u
export PYTHONPATH=$PWD
OUT=${OUT:-/tmp/k3diff-schedule-smoke}; mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
echo "=== 1. GPU tests"
timeout -k 5 ${T1:-95} python3 -m pytest -q -s -rs -p no:cacheprovider tests/k3diff/test_schedule_gpu.py > "$OUT/gpu_tests.txt" 2>&1
echo "exit $?"; grep -E "passed|failed|FAILED|Error|error|matmuls|assert" "$OUT/gpu_tests.txt" | head -40
echo "=== 2. schedule bugs"
timeout -k 5 ${T2:-90} python3 -m k3diff.tools.schedule_hunt --device cuda --examples ${EXAMPLES:-8} > "$OUT/hunt.txt" 2>&1
echo "exit $?"; tail -12 "$OUT/hunt.txt"
GB=k3diff.backends.blocked_graph:TorchBlockedGraphBackend
for dim in on off; do
  echo "=== 3. cost, schedule dimension $dim"
  env_sched=""; [ "$dim" = off ] && env_sched=off
  K3DIFF_SCHEDULE=$env_sched timeout -k 5 ${T3:-35} python3 -m pytest -p k3diff.plugin tests/differential --k3diff \
    --k3diff-backend $GB --k3diff-device cuda --k3diff-profile quick --k3diff-preset small --k3diff-seed 61 -k kda \
    --k3diff-report "$OUT/cost_$dim.jsonl" -q -p no:cacheprovider > "$OUT/cost_$dim.txt" 2>&1
  echo "exit $?"; grep -E "cases/s|schedule|never crossed|passed|failed" "$OUT/cost_$dim.txt" | head -12
done
echo "=== 4. sanitize"
which compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null
CS=$(which compute-sanitizer 2>/dev/null || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout -k 5 ${T4:-40} python3 -m k3diff.cli sanitize corpora/regressions/kda-562c33e401e3.json --tool memcheck \
  --backend torch-blocked ${CS:+--sanitizer $CS} > "$OUT/sanitize.txt" 2>&1
echo "exit $?"; tail -8 "$OUT/sanitize.txt"
