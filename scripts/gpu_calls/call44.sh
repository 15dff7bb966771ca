#!/usr/bin/env bash
# call 44 (twelfth session): PDL's trigger. Call 43 measured PDL (wait, then launch_dependents at
# once) slower than no PDL on two MLA rows (8 / 1k x0.94, 1 / 32k x0.94). Here the shipped tree
# (trigger at once) and a scratch copy whose kernels trigger only by exiting (no
# launch_dependents: the next grid still launches before this one's memory flush), each with the
# no-PDL column measured in its same run; then the fixed tests.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-540}
[ -n "${LATE_ONLY:-}" ] || TAIL=12 cmd A_mla_early 80 python3 -m megakernel.tools.bench_mla --dims full --batches 1,8 --lens 1024,32768
[ -n "${LATE_ONLY:-}" ] || TAIL=6 cmd B_kda_early 40 python3 -m megakernel.tools.bench_kda --dims full
[ -n "${LATE_ONLY:-}" ] || TAIL=12 cmd C_moe_early 100 python3 -m megakernel bench --configs full --batches 1,8 --no-compile
# the scratch tree: pdl.enter() without launch_dependents (its own kernel cache)
rm -rf /tmp/late && mkdir -p /tmp/late && cp -r megakernel /tmp/late/ && \
  sed -i 's/^    cute.arch.griddepcontrol_launch_dependents()$/    pass/' /tmp/late/megakernel/pdl.py && \
  grep -c "launch_dependents()" /tmp/late/megakernel/pdl.py > $R/late_patch.txt
export MEGAKERNEL_CACHE=/tmp/late/.mkcache L=$PWD
( cd /tmp/late && PYTHONPATH=/tmp/late:$L:$PYTHONPATH TAIL=12 cmd D_mla_late 200 python3 -m megakernel.tools.bench_mla --dims full --batches 1,8 --lens 1024,32768 )
( cd /tmp/late && PYTHONPATH=/tmp/late:$L:$PYTHONPATH TAIL=6 cmd E_kda_late 100 python3 -m megakernel.tools.bench_kda --dims full )
( cd /tmp/late && PYTHONPATH=/tmp/late:$L:$PYTHONPATH TAIL=12 cmd F_moe_late 130 python3 -m megakernel bench --configs full --batches 1,8 --no-compile )
export MEGAKERNEL_CACHE=$PWD/.mkcache
TAIL=14 cmd G_tests $(left) python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_pdl_gpu.py tests/megakernel/test_mk_gpu.py -k "layer or fast_call"
finish
