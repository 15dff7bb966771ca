#!/usr/bin/env bash
# call 7 (next session, issue 30): are the H200's verdicts bitwise the same across the megakernel's
# house refactor? The throughput tool of the merge that landed it (054c9e8) judges the same drawn
# cases with its own tree and with its first parent's (76a4316), megakernel candidate, every stage,
# and says per stage "bitwise", "same" (1e-9) or "different" (exit 1). Small dims: one compile per tree.
source "$(dirname "$0")/common.sh"
export OMP_NUM_THREADS=12 END=${END:-570}
git worktree add -f /tmp/after 054c9e8 > /dev/null 2>&1 || { echo "no commit 054c9e8 in this clone" > $R/A_bitwise.txt; finish; exit 0; }
( cd /tmp/after && PYTHONPATH=/tmp/after:$PYTHONPATH TAIL=30 R=$R cmd A_bitwise $(left) python3 -m k3diff.tools.throughput --device cuda \
    --backend megakernel.backend:MegakernelBackend --preset small --stages moe,mla,kda,layer --cases 30 --compare-with 76a4316 )
# then, with what time is left, issue 31's two-limit roofline on its first GPU run (HEAD's bench_mla)
[ "${BENCH:-1}" = 1 ] && TAIL=40 cmd B_bench_mla $(left) python3 -m megakernel.tools.bench_mla --dims full
finish
