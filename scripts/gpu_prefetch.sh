#!/usr/bin/env bash
# The attention steps' L2 prefetch stages on the H200 (megakernel/k_l2_prefetch.py), in one call:
# side-by-side timings (tune_prefetch: MLA forked and fused, KDA; both L2 policies), then the
# GPU test that every prefetch setting keeps the bits. Usage (device machine, repo root):
#   source .device/env.sh && bash scripts/gpu_prefetch.sh [steps...]   (default: 1 2 3 4 5)
# Steps: 1 MLA (its default mode) at batch 1, 8, 64; 2 MLA fused at batch 1; 3 KDA at batch 1,
# 8, 64; 4 tests/megakernel/test_mk_side_stream_gpu.py; 5 the MoE's W_up beside expert_down
# (tune_streams, bits checked against one stream). Log: ${OUT:-/tmp}/prefetch.log.
set -u
LOG="${OUT:-/tmp}/prefetch.log"
export MEGAKERNEL_CACHE="${MEGAKERNEL_CACHE:-/tmp/mkc}"
run() { echo "== $*" | tee -a "$LOG"; timeout 400 "$@" 2>&1 | grep -v Warning | tee -a "$LOG"; }
for s in "${@:-1 2 3 4 5}"; do
  for t in $s; do
    case $t in
      1) run python -m megakernel.tools.tune_prefetch --steps mla --batches 1,8,64 --last 0,1 ;;
      2) run python -m megakernel.tools.tune_prefetch --steps mla --streams fused --batches 1 \
           --mla-sets "o@mla_qb:32,o@mla_qb:48,o@mla_absorb:40,a@start:all,qb@mla_x:32,qb@mla_norm:all,a@start:all;qb@mla_norm:all;o@mla_absorb:40" ;;
      3) run python -m megakernel.tools.tune_prefetch --steps kda --batches 1,8,64 --last 0,1 ;;
      4) run python -m pytest -q -p no:randomly tests/megakernel/test_mk_side_stream_gpu.py ;;
      5) run python -m megakernel.tools.tune_streams --batches 1,8 \
           --modes "start/none/0,start/none/0 pf_up24,start/none/0 pf_up48" ;;
      *) echo "gpu_prefetch.sh: steps are 1-5; got $t" >&2; exit 2 ;;
    esac
  done
done
