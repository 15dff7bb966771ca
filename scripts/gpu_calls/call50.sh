#!/usr/bin/env bash
# call 50 (twelfth session), 560fbf4's kernels: what calls 46-48 left out. The layer's GPU tests,
# the planted bugs of gpu_check_side.sh (the GEMV's column-slice stride, on the tensor-core GEMV
# whose batch <= 8 variants changed), gpu_check_kda.sh and gpu_check_layer.sh, then memcheck over
# the MLA and KDA k3diff GPU tests while time is left.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-380}
TAIL=8 cmd A_layer_tests 110 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_layer_gpu.py
source scripts/lane.sh
OUT_SAVE=$OUT; OUT=$R
lane_planted mla k_gemv_mma.py 's/stride=(self.ldy, 1)))/stride=(self.N, 1)))/' B_side_planted_mla
lane_planted kda k_kda_core.py \
  's/st\[r \* KPL + j\] \* ke\[j\]        # decayed state/st[r * KPL + j] * vec[2, part * RPS + warp + NW * r]/' C_kda_planted
lane_planted layer k_attn_res.py 's/m\[e\] = wn \* pv\[e\]/m[e] = Float32(0.0)/' D_layer_planted
OUT=$OUT_SAVE
TAIL=6 cmd E_memcheck_mla $(left) compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -q -p no:cacheprovider \
  tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain"
finish
