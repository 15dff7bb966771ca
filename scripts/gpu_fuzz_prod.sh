#!/usr/bin/env bash
# Issue 12, "fuzz where production runs", on one H200 (CuTe DSL available), from the project root:
#     bash scripts/gpu_fuzz_prod.sh            # every step, < 600 s (step timeouts T_SUITE 270, T_HUNT 120, T_BENCH 70 s)
#     bash scripts/gpu_fuzz_prod.sh suite      # one step: suite | planted | bench
# Logs go to $OUT. Steps:
#   suite    `pytest --k3diff --k3diff-preset full -k moe --k3diff-profile ci` against the megakernel:
#            40 fuzzed cases + 5 batch-invariance cases, about half at the real K3 MoE dims (E in
#            {896, 256, 257, 512} and around the kernel's declared boundaries, top-k 1..16, both
#            formats, scaling 1 / 2.5, batch 1..256), the rest at small dims; the summary's coverage
#            table names every declared boundary the run did not cross (also in $OUT/full_cases.jsonl);
#   planted  a bug planted in a throwaway copy of the kernel that shows only when E > 256 (k_route:
#            the second expert a thread scores, id tid + 256, is reported as tid + 255), hunted with
#            `k3diff hunt --preset full` (and with `--preset small`: before issue 28 its fixed E=112 never
#            reached that code; its menu now draws E 256/257/512/513, so it should catch the bug too);
#   bench    cases/s of the moe stage on cuda: small dims (current code vs c9944a8 on the same cases,
#            verdicts compared bit for bit) and full dims (current code only: c9944a8 draws full-size
#            weights on the CPU and clones them per case).
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
MK=megakernel.backend:MegakernelBackend      # the registered name `megakernel`, without needing the install
# the pytest plugin: through its entry point when k3diff is installed, else named with -p
PLUG="-p k3diff.plugin"
python3 -c "from importlib.metadata import entry_points as e; import sys; sys.exit(0 if any(p.name == 'k3diff' for p in e(group='pytest11')) else 1)" && PLUG=""
# the baseline of the bench: c9944a8 when this copy has the git history, else none
BASE=$(git rev-parse --verify -q c9944a8^{commit} >/dev/null 2>&1 && echo c9944a8 || echo none)
SEED=${K3DIFF_SEED:-20261130}
WHAT=${1:-all}
step() { echo; echo "=== $* ($(date -u +%T))"; }
want() { [ "$WHAT" = all ] || [ "$WHAT" = "$1" ]; }
nvidia-smi --query-gpu=name,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"

if want suite; then
  step "suite: k3diff --k3diff-preset full -k moe --k3diff-profile ci vs megakernel"
  start=$SECONDS
  timeout ${T_SUITE:-270} python3 -m pytest $PLUG tests/differential --k3diff --k3diff-preset full -k moe --k3diff-profile ci \
    --k3diff-backend $MK --k3diff-seed $SEED --k3diff-report "$OUT/full_cases.jsonl" -q -p no:cacheprovider \
    > "$OUT/full_moe_full.txt" 2>&1
  echo "exit $? after $((SECONDS - start)) s" >> "$OUT/full_moe_full.txt"
  sed -n '/k3diff summary/,$p' "$OUT/full_moe_full.txt" | tee "$OUT/full_moe.txt"
  tail -3 "$OUT/full_moe_full.txt"
  python3 - "$OUT/full_cases.jsonl" <<'PY' | tee -a "$OUT/full_moe.txt"
import json, sys
from collections import Counter
rs = [json.loads(l) for l in open(sys.argv[1])]
print("cases by preset:", dict(Counter(r["coverage"]["preset"] for r in rs)),
      "seconds:", round(sum(r["seconds"] for r in rs), 1),
      "max GPU memory is in gpu_after.txt")
PY
  nvidia-smi --query-gpu=memory.used --format=csv > "$OUT/gpu_after.txt"
fi

if want planted; then
  step "planted: k_route reports expert tid+256 as tid+255 (E > 256 only)"
  rm -rf /tmp/planted && mkdir /tmp/planted && cp -r k3diff reference megakernel tests /tmp/planted/
  sed -i 's/^\( *\)bi = tid + j \* THREADS$/\1bi = tid + j * THREADS - 1/' /tmp/planted/megakernel/k_route.py
  diff megakernel/k_route.py /tmp/planted/megakernel/k_route.py | tee "$OUT/planted.txt"
  (cd /tmp/planted && PYTHONPATH=/tmp/planted timeout ${T_HUNT:-120} python3 -m k3diff.cli hunt --backend $MK \
    --stage moe --examples 80 --seed $SEED --preset full 2>&1 | head -8 | tee -a "$OUT/planted.txt")
  echo "--- the small space (E around 256 and 512 since issue 28):" | tee -a "$OUT/planted.txt"
  (cd /tmp/planted && PYTHONPATH=/tmp/planted timeout 45 python3 -m k3diff.cli hunt --backend $MK \
    --stage moe --examples 30 --seed $SEED --preset small 2>&1 | head -4 | tee -a "$OUT/planted.txt")
  rm -rf /tmp/planted
fi

if want bench; then
  step "bench: moe cases/s on cuda, small (vs c9944a8) and full dims"
  git worktree prune 2>/dev/null
  timeout ${T_BENCH:-70} python3 -m k3diff.tools.throughput --device cuda --backend $MK --preset small --stages moe \
    --cases 200 --compare-with $BASE 2>&1 | tail -4 | tee "$OUT/bench_small.txt"
  timeout ${T_BENCH:-70} python3 -m k3diff.tools.throughput --device cuda --backend $MK --preset full --keep-preset full \
    --stages moe --cases 20 --compare-with none 2>&1 | tail -4 | tee "$OUT/bench_full.txt"
fi
