#!/usr/bin/env bash
# call 91 (twenty-second session): order_probe.py again (call 90's stopped at its buffer's read:
# a sum to int32 copied the whole buffer), then nightly seed 97104's shard 7 if time is left.
# Carry [".device", ".gpu"]: source .device/env.sh && bash scripts/gpu_calls/call91.sh
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-280}
TAIL=20 cmd A_order_probe 170 python3 scripts/gpu_calls/order_probe.py
nightly_shards 97104 8 7
finish
