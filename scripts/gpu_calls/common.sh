# The lead's H200 calls of 2026-12-02 (the closing note's figures): bash scripts/gpu_calls/callN.sh from the
# project root on the GPU machine, .device carried; an optional kernel-cache tarball at .gpu/mkc.tgz.
# sourced by the lead's call scripts: lanes with timeouts, results under $R, one tarball to $OUT
set -uo pipefail
source .device/env.sh
# the kernel cache lives in an ignored folder of the checkout: a warm machine keeps it between calls
export MEGAKERNEL_CACHE=$PWD/.mkcache K3DIFF_PROGRESS=off PYTHONPATH=$PWD:$PWD/tests/k3diff${PYTHONPATH:+:$PYTHONPATH}
[ -d .mkcache ] || { mkdir -p .mkcache && { [ -f .gpu/mkc.tgz ] && tar xzf .gpu/mkc.tgz -C .mkcache; true; }; }
echo "kernel cache at start: $(find .mkcache -type f | wc -l) files" > /tmp/cache_start.txt
R=/tmp/res; mkdir -p $R/seeds
MK=megakernel.backend:MegakernelBackend
T0=$SECONDS
left() { echo $(( ${END:-575} - (SECONDS - T0) )); }
ci() {  # ci NAME TIMEOUT [pytest args]: the ci profile against the megakernel (BACKEND=...: another)
  local name=$1 t=$2; shift 2
  [ "$t" -gt "$(left)" ] && t=$(left); [ "$t" -lt 20 ] && { echo "=== $name skipped: no time" > $R/$name.txt; return; }
  local s=$SECONDS
  timeout -s INT -k 20 $t python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend ${BACKEND:-$MK} \
    --k3diff-profile ${PROFILE:-ci} --k3diff-report $R/$name.jsonl --k3diff-save /tmp/seeds-$name -q -p no:cacheprovider "$@" > $R/$name.log 2>&1
  local rc=$?
  { echo "=== $name rc=$rc $((SECONDS-s)) s (ended at $((SECONDS-T0)) s)"; sed -n '/k3diff summary/,/^coverage/p' $R/$name.log | head -16;
    grep -E "^never crossed|^never routed|^FAILED|FAIL |passed|failed" $R/$name.log | cut -c1-300 | head -12; } > $R/$name.txt
  cp /tmp/seeds-$name/*.json $R/seeds/ 2>/dev/null; true
}
cmd() {  # cmd NAME TIMEOUT command...: any command, its log and exit
  local name=$1 t=$2; shift 2
  [ "$t" -gt "$(left)" ] && t=$(left); [ "$t" -lt 10 ] && { echo "=== $name skipped: no time" > $R/$name.txt; return; }
  local s=$SECONDS
  timeout -s INT -k 20 $t "$@" > $R/$name.log 2>&1
  local rc=$?
  { echo "=== $name rc=$rc $((SECONDS-s)) s (ended at $((SECONDS-T0)) s)"; tail -${TAIL:-40} $R/$name.log | cut -c1-300; } > $R/$name.txt
}
finish() {
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used,memory.total --format=csv > $R/gpu.txt
  git rev-parse HEAD > $R/commit.txt 2>/dev/null; git status --short | head >> $R/commit.txt
  ls $R/*.jsonl >/dev/null 2>&1 && python3 scripts/gpu_calls/count.py $R/*.jsonl > $R/zz_counts.txt 2>&1
  cat /tmp/cache_start.txt $R/*.txt > $OUT/summary.txt; tar czf $OUT/res.tgz -C /tmp res
  tar czf $OUT/mkc.tgz -C .mkcache .; ls -la $OUT
}
nightly_shards() {  # nightly_shards SEED N I...: shards I/N of the nightly profile while > 150 s are left
  local seed=$1 n=$2 i; shift 2
  for i in "$@"; do
    [ "$(left)" -lt 150 ] && { echo "=== N_${seed}_${i}of${n} not started: $(left) s left" > $R/N_${seed}_${i}of${n}.txt; continue; }
    PROFILE=nightly ci N_${seed}_${i}of${n} $(left) --k3diff-seed $seed --k3diff-shard $i/$n
  done
}
ncu_experts() {  # ncu_experts T STAGE...: ncu over one warm MXFP4 expert launch each (up, down; ncu_experts.py), to $OUT/ncu
  local T=$1 r n; shift; mkdir -p $OUT/ncu
  for r in "$@"; do
    n=ncu_${r}_$T
    TAIL=30 cmd E_$n 70 ncu --nvtx --nvtx-include "$r/" --launch-skip 1 --launch-count 1 \
      --section WarpStateStats --section SourceCounters --section SpeedOfLight --section MemoryWorkloadAnalysis \
      -o $OUT/ncu/$n python3 scripts/gpu_calls/ncu_experts.py $T
    [ -f $OUT/ncu/$n.ncu-rep ] && { ncu --import $OUT/ncu/$n.ncu-rep --page details --csv > $OUT/ncu/$n.details.csv 2>&1;
      ncu --import $OUT/ncu/$n.ncu-rep --page source --csv --print-source sass > $OUT/ncu/$n.sass.csv 2>&1; rm -f $OUT/ncu/$n.ncu-rep; }
  done
}
