#!/usr/bin/env bash
# call 51 (twelfth session), 560fbf4's kernels: the KDA and layer sanitizer lanes
# (gpu_check_kda.sh step 4, gpu_check_layer.sh's memcheck) and the MoE's tests under memcheck.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-300}
TAIL=6 cmd A_memcheck_kda 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_kda_gpu.py -k "passes_k3diff and plain"
TAIL=6 cmd B_memcheck_layer 100 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_layer_gpu.py -k "passes_k3diff and T1"
TAIL=6 cmd C_memcheck_moe $(left) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_gpu.py -k "natural_routing and 8"
finish
