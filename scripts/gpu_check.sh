#!/usr/bin/env bash
# The GPU checks a maintainer runs, as named lanes. Any CUDA machine with the project installed
# (`pip install -e '.[dev]'`, CuTe DSL for the megakernel), from the repository root:
#
#   bash scripts/gpu_check.sh OUTDIR [LANE...] [-- extra pytest arguments for the soak lane]
#
# OUTDIR receives everything: lanes.tsv (lane, GPU, seconds, exit status; 124 = LANE_TIMEOUT hit),
# check.log (every lane's logs, lane by lane) and one folder per lane. With no LANE: the default
# set (DEFAULT below); `all`: every lane. Several lanes run side by side, one GPU each, each GPU
# taking the next lane as it frees (on one GPU they run one after another). Exit 0 when every lane
# passed, 1 when one failed, 2 on a bad command (one line).
#
#   tests     the megakernel's GPU tests (tests/megakernel: k3diff verdicts on chosen cases)
#   ci        `pytest --k3diff --k3diff-profile ci` per stage against the megakernel, the default
#             preset (on a GPU one case in three at K3's real dims); the moe suite again in the
#             persistent launch mode, the mla suite on its CUDA-core and mma.sync paths
#   full      every stage's ci suite at --k3diff-preset full: red on a failure, a declared boundary
#             never crossed, or no case at K3's real dims
#   time      the whole ci run from a cold kernel cache, timed: red past LIMIT seconds (600) or
#             without real dims in every stage
#   mutants   bugs planted in throwaway copies of the kernels, each hunted with `k3diff hunt`:
#             red when one is not caught
#   sanitize  compute-sanitizer memcheck over the moe regression seeds and each step's GPU tests
#   side      the attention steps' side stream: every stream mode's bits, tune_fork side by side
#   bench     the steps' benches (µs, roofline, torch beside): moe, kda, mla, the layer, and the
#             attention steps at verify widths and on the FP8 cache
#   soak      the false-alarm soak: a correct candidate (BACKEND, default the megakernel) under the
#             nightly profile, seed after seed, until TARGET judged runs or LIMIT seconds
#   adapters  the public-library candidates fla (KDA) and flashinfer (MLA), where installed
#
# Knobs (environment): K3DIFF_SEED (the suites' seed), LANE_TIMEOUT (seconds a lane may run,
# default 3600), NGPU (GPUs to use), MEGAKERNEL_CACHE (shared by the lanes: its writes are renames);
# soak: TARGET, LIMIT, SEEDS, WORKERS, BACKEND. GPU_CHECK_DRY=1 prints each lane's commands instead
# of running them, GPU_CHECK_LANES (lines of name=command) replaces the lanes: the CPU tests of
# this script (tests/megakernel/test_gpu_check.py) use both.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ME=scripts/gpu_check.sh
DEFAULT="tests ci full mutants sanitize side"
EVERY="tests ci full time mutants sanitize side bench soak adapters"
MK=megakernel.backend:MegakernelBackend
SEED=${K3DIFF_SEED:-20261201}
DRY=${GPU_CHECK_DRY:-0}
die() { echo "gpu_check.sh: $*" >&2; exit 2; }

# ---------------------------------------------------------------- one lane's steps
# run LOG CMD...: CMD's output to $LO/LOG.txt, its last lines shown; the lane fails if CMD does
run() {
  local log="$LO/$1.txt"; shift
  echo "+ $(settings)$*" | tee -a "$LO/commands.txt"
  if [ "$DRY" = 1 ]; then echo "dry: $*" > "$log"; return 0; fi
  "$@" > "$log" 2>&1
  local rc=$?
  tail -8 "$log"
  [ "$rc" -eq 0 ] || { echo "FAILED ($rc): $*"; FAILED=1; }
  return "$rc"
}

settings() {   # the megakernel's settings this command runs under, as a prefix of its line
  local v
  for v in MEGAKERNEL_STREAMS MK_MLA_MMA MK_GEMV_MMA; do [ -n "${!v:-}" ] && printf '%s=%s ' "$v" "${!v}"; done
}

suite() {   # suite LOG STAGE [pytest args...]: the stage's k3diff suite against the megakernel
  local log=$1 stage=$2; shift 2
  run "$log" python3 -m pytest -p k3diff.plugin tests/differential --k3diff --k3diff-backend $MK \
    --k3diff-profile ci -k "$stage" --k3diff-seed "$SEED" --k3diff-report "$LO/$log.jsonl" \
    -q -p no:cacheprovider "$@"
}

# plant LOG FILE SED STAGE: the bug SED planted in a throwaway copy of megakernel/FILE, hunted;
# red when the expression changed nothing or the hunt found no failure (`k3diff hunt` exits 1 on one)
plant() {
  local log=$1 file=$2 expr=$3 stage=$4 copy="$LO/planted"
  echo "+ $(settings)plant $file: $expr; k3diff hunt --stage $stage" | tee -a "$LO/commands.txt"
  # a dry run still checks that the expression changes the file (kernels move on; a stale
  # expression would plant nothing and the hunt would "fail to catch" a bug never planted)
  if sed "$expr" "megakernel/$file" | cmp -s - "megakernel/$file"; then
    echo "planted bug NOT APPLIED: the expression matched nothing in megakernel/$file" | tee "$LO/$log.txt"
    FAILED=1; return 1
  fi
  [ "$DRY" = 1 ] && { echo "dry: plant $file" > "$LO/$log.txt"; return 0; }
  rm -rf "$copy" && mkdir -p "$copy" && cp -r k3diff reference megakernel "$copy/"
  sed -i "$expr" "$copy/megakernel/$file"
  (cd "$copy" && PYTHONPATH=$copy${PYTHONPATH:+:$PYTHONPATH} python3 -m k3diff.cli hunt --backend $MK \
    --stage "$stage" --examples 80 --seed "$SEED") > "$LO/$log.txt" 2>&1
  local rc=$?
  rm -rf "$copy"
  head -6 "$LO/$log.txt"
  [ "$rc" -eq 1 ] || { echo "NOT CAUGHT ($rc): $file"; FAILED=1; }
}

memcheck() {   # memcheck LOG CMD...: compute-sanitizer memcheck over CMD
  run "$1" compute-sanitizer --tool memcheck --error-exitcode 9 "${@:2}"
}

lane_tests() {
  run mk_tests python3 -m pytest -q tests/megakernel -p no:cacheprovider
}

lane_ci() {
  local s
  for s in moe mla kda layer; do suite "k3diff_$s" "$s"; done
  MEGAKERNEL_STREAMS=persistent suite k3diff_moe_persistent moe
  MK_MLA_MMA=0 suite k3diff_mla_cuda mla
  MK_MLA_MMA=sync suite k3diff_mla_sync mla
}

# the full preset: red on a failure, a declared boundary never crossed, no case at real dims
lane_full() {
  local s
  for s in moe mla kda layer; do
    suite "full_$s" "$s" --k3diff-preset full
    [ "$DRY" = 1 ] && continue
    grep -q "^never crossed: none" "$LO/full_$s.txt" \
      || { echo "full $s: FAILED (a declared boundary never crossed, or no coverage table)"; FAILED=1; }
    run "full_${s}_times" python3 -m k3diff.tools.run_times "$LO/full_$s.jsonl" --need-full "$s"
  done
}

lane_time() {
  local cold wall t0
  cold=$(mktemp -d)
  t0=$SECONDS
  MEGAKERNEL_CACHE=$cold run ci_time python3 -m pytest -p k3diff.plugin tests/differential --k3diff \
    --k3diff-backend $MK --k3diff-profile ci --k3diff-seed "$SEED" --k3diff-report "$LO/ci_time.jsonl" \
    -q -p no:cacheprovider
  wall=$((SECONDS - t0))
  rm -rf "$cold"
  echo "pytest after $wall s (limit ${LIMIT:-600} s)" | tee -a "$LO/ci_time.txt"
  [ "$DRY" = 1 ] && return
  [ "$wall" -le "${LIMIT:-600}" ] || { echo "time: FAILED (past the limit)"; FAILED=1; }
  run ci_time_stages python3 -m k3diff.tools.run_times "$LO/ci_time.jsonl" --need-full moe,mla,kda,layer
}

lane_mutants() {
  plant route k_route.py 's/((ov == v) \& (oi < i))/((ov == v) \& (oi > i))/; s/if vals\[j\] > bv:/if vals[j] >= bv:/' moe
  # the second expert a thread scores (id tid + 256) reported as tid + 255: wrong only when E > 256
  plant route_e256 k_route.py 's/^\( *\)bi = tid + j \* THREADS$/\1bi = tid + j * THREADS - 1/' moe
  # the two B words of an mma swapped in every token tile but the first: only batches > 8 go wrong
  MK_GEMV_MMA=1 plant gemv_mma k_gemv_mma.py 's/xw\[2 \* j\], xw\[2 \* j + 1\],/xw[2 * j + (1 if n else 0)], xw[2 * j + (0 if n else 1)],/' moe
  plant kda_decay k_kda_core.py \
    's/st\[r \* KPL + j\] \* ke\[j\]        # decayed state/st[r * KPL + j] * vec[2, part * RPS + warp + NW * r]/' kda
  plant mla_last_row k_mla_attn_wg.py 's/R1 = cutlass.min(R0 + W \* ch, n)/R1 = cutlass.min(R0 + W * ch, n) - 1/' mla
  MK_MLA_MMA=0 plant mla_cuda_last_row k_mla_attn.py \
    's/end = cutlass.min(s \* ch + ch, n)/end = cutlass.min(s * ch + ch, n) - 1/' mla
  MK_MLA_MMA=sync plant mla_sync_last_row k_mla_attn_mma.py \
    's/end = cutlass.min(start + ch, n)/end = cutlass.min(start + ch, n) - 1/' mla
  plant layer_prefix k_attn_res.py 's/m\[e\] = wn \* pv\[e\]/m[e] = Float32(0.0)/' layer
  plant side_ldy k_gemv_mma.py 's/stride=(self.ldy, 1)))/stride=(self.N, 1)))/' mla
  plant side_gate k_kda_norm.py 's/Z\[t, kd.G0 + c0\]/Z[t, 3 * P + c0]/' kda
  # a verify step's token j also attending row L + j + 1, its next draft's (the causal mask among
  # the drafts), and a KDA slot continuing from the token before the last accepted (verify.py)
  plant verify_causal verify.py 's/lens + jj, stages=CACHE_STAGES/torch.minimum(lens + jj + 1, lens + w - 1), stages=CACHE_STAGES/' mla
  plant verify_accept verify.py 's/return first + torch.clamp(accepted - 1, min=0)/return first + torch.clamp(accepted - 2, min=0)/' kda
}

lane_sanitize() {
  local seed
  for seed in corpora/regressions/moe-*.json; do
    memcheck "memcheck_$(basename "$seed" .json)" python3 -m k3diff.cli replay "$seed" --backend $MK
  done
  memcheck memcheck_kda python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_kda_gpu.py -k "passes_k3diff and plain"
  memcheck memcheck_mla python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_mla_gpu.py -k "passes_k3diff and plain"
  memcheck memcheck_layer python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_layer_gpu.py -k "passes_k3diff and T1"
}

lane_side() {
  run side_bits python3 -m pytest -q -p no:cacheprovider tests/megakernel/test_mk_side_stream_gpu.py
  run tune_fork python3 -m megakernel.tools.tune_fork
}

lane_bench() {
  run bench_moe python3 -m megakernel bench --out "$LO"
  run bench_kda python3 -m megakernel.tools.bench_kda --dims full
  run bench_mla python3 -m megakernel.tools.bench_mla --dims full
  run bench_verify python3 -m megakernel.tools.bench_verify --dims full
  run bench_layer env PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" python3 scripts/bench_layer.py
}

# the false-alarm soak: seed after seed until TARGET judged runs; each seed's report written as
# it goes (a stopped soak keeps what it judged); the merged per-stage table at the end. A failing
# case is a false alarm: its seed is in $LO/seeds (replay it, fix the cause, keep it as a regression)
lane_soak() {
  local target=${TARGET:-10000} backend=${BACKEND:-$MK} start have left s rc
  # the plugin through its entry point where k3diff is installed, else PYTEST_PLUGINS (xdist
  # workers inherit the environment; a -p flag has been seen to hang them at start on two GPUs)
  python3 -c "import importlib.metadata as m; assert any(e.name == 'k3diff.plugin' for e in m.entry_points(group='pytest11'))" \
    2>/dev/null || export PYTEST_PLUGINS=k3diff.plugin
  echo "+ soak $backend until $target runs: ${SOAK_ARGS[*]}" | tee -a "$LO/commands.txt"
  [ "$DRY" = 1 ] && return
  start=$(date +%s)
  for s in ${SEEDS:-$(seq 101 101 5050)}; do
    have=$(soak_runs)
    [ "$have" -ge "$target" ] && break
    left=$(( ${LIMIT:-999999999} - ($(date +%s) - start) ))
    [ "$left" -le 60 ] && { echo "soak: LIMIT of ${LIMIT}s reached"; break; }
    echo "soak: $have of $target runs; seed $s"
    timeout -s INT -k 30 "$left" python3 -m pytest tests/differential --k3diff --k3diff-profile nightly \
      --k3diff-backend "$backend" --k3diff-seed "$s" --k3diff-report "$LO/soak-$s.jsonl" \
      --k3diff-save "$LO/seeds" -n "${WORKERS:-1}" -q -p no:cacheprovider -p no:randomly "${SOAK_ARGS[@]}" \
      > "$LO/soak-$s.log" 2>&1
    rc=$?
    # a seed that judged nothing leaves no report; under xdist its cases are in the workers'
    # parts (soak-S.gwN.jsonl) beside the controller's start and end records
    grep -qs '"kind": *"case"' "$LO/soak-$s.jsonl" "$LO"/soak-$s.gw*.jsonl \
      || rm -f "$LO/soak-$s.jsonl" "$LO"/soak-$s.gw*.jsonl
    tail -3 "$LO/soak-$s.log"
    [ "$rc" -gt 1 ] && echo "soak: seed $s ended with exit $rc (see soak-$s.log)"
  done
  echo "soak: $(soak_runs) judged runs in $LO"
  python3 -m k3diff.cli report "$LO" --markdown - -o "$LO/report.html" | head -20
  [ -z "$(ls "$LO/seeds" 2>/dev/null)" ] || { echo "soak: FAILED (a false alarm: $LO/seeds)"; FAILED=1; }
}

soak_runs() {   # judged runs recorded so far in the lane's folder
  python3 - "$LO" <<'EOF'
import json, pathlib, sys
print(sum(1 for f in pathlib.Path(sys.argv[1]).glob("soak-*.jsonl") for line in f.open()
          if line.strip() and json.loads(line).get("kind") == "case"))
EOF
}

lane_adapters() {
  suite fla_kda kda --k3diff-backend fla
  suite flashinfer_mla mla --k3diff-backend flashinfer
  run fla_probe python3 scripts/adapter_probe.py --backend fla --stage kda --out "$LO/fla_probe.json"
  run flashinfer_probe python3 scripts/adapter_probe.py --backend flashinfer --stage mla --out "$LO/flashinfer_probe.json"
}

# ---------------------------------------------------------------- one lane, in its own process
if [ "${1:-}" = "--lane" ]; then
  name=$2 LO=$3; shift 3
  [ "${1:-}" = "--" ] && shift
  SOAK_ARGS=("$@")
  mkdir -p "$LO"; FAILED=0
  [ "$DRY" = 1 ] || nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,memory.used --format=csv > "$LO/gpu.txt" 2>&1
  "lane_$name"
  exit "$FAILED"
fi

# ---------------------------------------------------------------- the lanes side by side
[ $# -ge 1 ] && [ "$1" != "--" ] || die "usage: bash $ME OUTDIR [LANE...] [-- pytest args] (lanes: $EVERY)"
OUT=$1; shift
mkdir -p "$OUT" 2>/dev/null && [ -w "$OUT" ] || die "cannot write to $OUT"
OUT=$(cd "$OUT" && pwd)
NAMES=(); EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --) shift; EXTRA=("$@"); break ;;
    all) read -ra ALL <<<"$EVERY"; NAMES+=("${ALL[@]}") ;;
    *) [[ " $EVERY " == *" $1 "* ]] || die "unknown lane '$1' (lanes: $EVERY, all)"; NAMES+=("$1") ;;
  esac
  shift
done
[ ${#NAMES[@]} -gt 0 ] || read -ra NAMES <<<"$DEFAULT"
L=()
for n in "${NAMES[@]}"; do L+=("$n=bash $ME --lane $n $OUT/$n -- ${EXTRA[*]}"); done
if [ -n "${GPU_CHECK_LANES:-}" ]; then
  mapfile -t L < <(echo "$GPU_CHECK_LANES" | sed '/^ *$/d')
fi
for l in "${L[@]}"; do
  [[ "$l" =~ ^[a-z_]+=.+ ]] || die "a lane is name=command; got '$l'"
done
if [ -n "${NGPU:-}" ]; then N=$NGPU
elif [ "$DRY" = 1 ]; then N=2
else N=$(nvidia-smi -L 2>/dev/null | wc -l); fi
[ "$N" -ge 1 ] 2>/dev/null || die "no GPU found (NGPU=$N)"
# the lanes' shared counter and table, inside OUT (a machine's /tmp may be cleaned under a long run)
W=$OUT/.lanes; rm -rf "$W"; mkdir -p "$W"; trap 'rm -rf "$W"' EXIT
echo 0 > "$W/next"
echo "${#L[@]} lane(s) on $N GPU(s), results in $OUT"

take() {   # the next lane's index, under a lock (the GPUs' workers share one counter)
  (flock 9; n=$(cat "$W/next"); echo $((n + 1)) > "$W/next"; echo "$n") 9> "$W/lock"
}

lane() {   # lane INDEX GPU
  local name=${L[$1]%%=*} cmd=${L[$1]#*=} t0=$SECONDS rc
  mkdir -p "$OUT/$name"
  CUDA_VISIBLE_DEVICES=$2 timeout "${LANE_TIMEOUT:-3600}" bash -c "$cmd" > "$OUT/$name/stdout.txt" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$2" $((SECONDS - t0)) "$rc" >> "$W/lanes.tsv"
  echo "lane $name on GPU $2: exit $rc after $((SECONDS - t0)) s"
}

worker() {   # worker GPU: lanes until none is left
  local i=0
  while :; do
    i=$(take)
    [ -n "$i" ] && [ "$i" -lt "${#L[@]}" ] || return
    lane "$i" "$1"
  done
}

for g in $(seq 0 $((N - 1))); do worker "$g" & done
wait
{ printf 'lane\tGPU\tseconds\texit\n'; cat "$W/lanes.tsv"; } > "$OUT/lanes.tsv"
for l in "${L[@]}"; do
  name=${l%%=*}
  echo "################ lane $name: ${l#*=}"
  for f in "$OUT/$name"/*.txt; do
    [ -f "$f" ] && { echo "---- $(basename "$f")"; cat "$f"; echo; }
  done
done > "$OUT/check.log" 2>&1
column -t -s $'\t' "$OUT/lanes.tsv" 2>/dev/null || cat "$OUT/lanes.tsv"
ran=$(($(wc -l < "$OUT/lanes.tsv") - 1))
[ "$ran" -eq "${#L[@]}" ] || { echo "gpu_check.sh: $ran of ${#L[@]} lanes reported" >&2; exit 1; }
if awk -F'\t' 'NR > 1 && $4 != 0 { bad = 1 } END { exit !bad }' "$OUT/lanes.tsv"; then
  echo "gpu_check.sh: a lane exited non-zero (lanes.tsv; its output in check.log)" >&2
  exit 1
fi
