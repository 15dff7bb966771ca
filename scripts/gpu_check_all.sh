#!/usr/bin/env bash
# Every GPU check of the project in ONE device call: the steps of gpu_check.sh (and more, below)
# as lanes run side by side, one GPU each (prod_*: the production-shape suite of each stage,
# gpu_check_prod.sh, so no preset is left out), each GPU taking the next lane as it frees (so on a
# 4- or 8-GPU machine the whole check fits one call; on one GPU the lanes run one after another).
# From the project root after `source .device/env.sh`:
#   bash scripts/gpu_check_all.sh            # the default lanes (LANES below)
# Each lane gets CUDA_VISIBLE_DEVICES=<its GPU>, its own log folder and its own throwaway copy
# for planted bugs (PLANT); the compiled-kernel disk cache is shared (its writes are renames).
# Comes back in $OUT: lanes.tsv (lane, GPU, seconds, exit code; 124 = its LANE_TIMEOUT hit) and
# check_all.log (every lane's output and log files, lane by lane). Exit 1 if a lane exited non-zero.
# GPU_CHECK_LANES (lines of name=command) replaces the lane list; GPU_CHECK_DRY=1 prints each lane's
# command instead of running it (tests/megakernel/test_gpu_check_all.py runs that on the CPU);
# NGPU overrides the GPU count.
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
W=${GPU_CHECK_WORK:-/tmp/gpu_check_all}; rm -rf "$W"; mkdir -p "$W"
export MEGAKERNEL_CACHE=${MEGAKERNEL_CACHE:-/tmp/mkc}
LANE_TIMEOUT=${LANE_TIMEOUT:-580}

LANES="moe_tests=bash scripts/gpu_check.sh 1
moe_suites=bash scripts/gpu_check.sh 2
moe_planted=bash scripts/gpu_check.sh 3
moe_memcheck=bash scripts/gpu_check.sh 4
kda=bash scripts/gpu_check_kda.sh
mla=bash scripts/gpu_check_mla.sh
layer=bash scripts/gpu_check_layer.sh
side=bash scripts/gpu_check_side.sh 1 3 5
prod_moe=bash scripts/gpu_check_prod.sh moe
prod_mla=bash scripts/gpu_check_prod.sh mla
prod_kda=bash scripts/gpu_check_prod.sh kda
prod_layer=bash scripts/gpu_check_prod.sh layer"
[ -n "${GPU_CHECK_LANES:-}" ] && LANES=$GPU_CHECK_LANES

mapfile -t L < <(echo "$LANES" | sed '/^ *$/d')
for l in "${L[@]}"; do
  case "$l" in
    [a-z]*=?*) ;;
    *) echo "gpu_check_all.sh: a lane is name=command; got '$l'" >&2; exit 2 ;;
  esac
done
if [ -n "${NGPU:-}" ]; then N=$NGPU
elif [ "${GPU_CHECK_DRY:-0}" = 1 ]; then N=2
else N=$(nvidia-smi -L 2>/dev/null | wc -l); fi
if ! [ "$N" -ge 1 ] 2>/dev/null; then
  echo "gpu_check_all.sh: no GPU found (NGPU=$N)" >&2; exit 2
fi
echo "${#L[@]} lanes on $N GPU(s)"
echo 0 > "$W/next"

take() {            # the next lane index, under a lock (the workers share one counter)
  (flock 9; i=$(cat "$W/next"); echo $((i + 1)) > "$W/next"; echo "$i") 9> "$W/lock"
}

lane() {            # lane INDEX GPU
  local name=${L[$1]%%=*} cmd=${L[$1]#*=} t0 rc
  mkdir -p "$W/$name"
  t0=$(date +%s)
  if [ "${GPU_CHECK_DRY:-0}" = 1 ]; then
    echo "dry: GPU $2: $cmd" > "$W/$name/stdout.txt"; rc=0
  else
    CUDA_VISIBLE_DEVICES=$2 OUT="$W/$name" PLANT="$W/$name.planted" \
      timeout "$LANE_TIMEOUT" bash -c "$cmd" > "$W/$name/stdout.txt" 2>&1
    rc=$?
  fi
  printf '%s\t%s\t%s\t%s\n' "$name" "$2" $(( $(date +%s) - t0 )) "$rc" >> "$W/lanes.tsv"
  echo "lane $name on GPU $2: exit $rc after $(( $(date +%s) - t0 )) s"
}

worker() {          # worker GPU: lanes until none is left
  local i
  while :; do
    i=$(take)
    [ "$i" -ge "${#L[@]}" ] && return
    lane "$i" "$1"
  done
}

for g in $(seq 0 $((N - 1))); do worker "$g" & done
wait

{
  printf 'lane\tGPU\tseconds\texit\n'
  cat "$W/lanes.tsv"
} > "$OUT/lanes.tsv"
for l in "${L[@]}"; do
  name=${l%%=*}
  echo "################ lane $name: ${l#*=}"
  for f in "$W/$name"/*; do
    [ -f "$f" ] && { echo "---- $(basename "$f")"; cat "$f"; echo; }
  done
done > "$OUT/check_all.log" 2>&1
column -t -s $'\t' "$OUT/lanes.tsv" 2>/dev/null || cat "$OUT/lanes.tsv"
ran=$(($(wc -l < "$OUT/lanes.tsv") - 1))
if [ "$ran" -ne "${#L[@]}" ]; then
  echo "gpu_check_all.sh: $ran of ${#L[@]} lanes reported" >&2; exit 1
fi
if awk -F'\t' 'NR > 1 && $4 != 0 { bad = 1 } END { exit !bad }' "$OUT/lanes.tsv"; then
  echo "gpu_check_all.sh: a lane exited non-zero (lanes.tsv; its output in check_all.log)" >&2
  exit 1
fi
