#!/usr/bin/env bash
# call 42 (eleventh session): the whole check with the wgmma attention the default
# (config.Attn.mla_wg; splits of 512 rows past SHORT): the GPU tests, ci at the full preset, then
# another ci seed while time is left.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-290}
TAIL=14 cmd A_mk_gpu 110 python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_gpu.py tests/megakernel/test_mk_mla_gpu.py
ci B_ci_full_99008 140 --k3diff-seed 99008 --k3diff-preset full
ci C_ci_99009 $(left) --k3diff-seed 99009
finish
