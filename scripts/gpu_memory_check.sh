#!/usr/bin/env bash
# GPU memory with the candidate in its own process, and the cost of judging outside it: this tree
# against the tree before the judge left the candidate's process (BASE, default .base: 850aeff's
# k3diff, reference, tests/differential, pyproject.toml, corpora). From the repository root:
#
#   bash scripts/gpu_memory_check.sh OUTDIR [LANE...]        (lanes: memory throughput; default both)
#
# memory      the same seed's moe fuzz run (profile ci, SEED) in each tree, one after the other, with
#             every process's peak memory written by scripts/memory_probe (the run's process and the
#             candidate's: torch.cuda.max_memory_reserved, peak RSS) and the GPU's used memory
#             sampled by nvidia-smi. Per tree: cases, full-dims cases judged, "case too large"
#             skips, failures, exit status, each process's peak. Red (exit 1) when this tree skips
#             more cases as too large than the base tree.
# throughput  k3diff.tools.throughput --isolate on: the SAME cases (drawn once, fields the base tree
#             reads) judged through each tree's own isolated checker, the sides alternated REPEAT
#             times; preset small (moe, mla, kda, layer), then the full-dims cases of preset full
#             (moe, mla).
#             Red when a case's outcome (pass, fail, skip, error) differs between the trees; a row
#             "DIFFERENT (outcomes same)" is two judges reporting differently on the same outcomes.
#
# OUTDIR gets summary.txt (what to read) and per lane and tree: the pytest log, the results file,
# the probe's files, the nvidia-smi samples. Knobs (environment): BASE, SEED (1), BACKEND
# (torch-blocked on both sides: the base tree has no megakernel of its own; BACKEND=megakernel puts
# this tree's megakernel on the base side's path after the base tree), DEVICE (cuda), REPEAT (2),
# SMALL_CASES (48), FULL_CASES (6), STAGES (moe,mla,kda,layer: preset small), FULL_STAGES (moe,mla:
# preset full, where each side's worker draws the full-dims weights itself, inside the clock, as a
# pytest worker does), LANE_TIMEOUT (seconds per command, 1800).
# GPU_MEMORY_DRY=1: the same commands on the CPU at a toy size (profile quick, the CPU's preset,
# 2 moe cases, one run a side): a check of the script itself, not a measurement.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${1:?usage: bash scripts/gpu_memory_check.sh OUTDIR [memory] [throughput]}
shift
LANES=${*:-memory throughput}
BASE=${BASE:-.base}
where=$(cd "$BASE" 2>/dev/null && pwd) || { echo "gpu_memory_check: no base tree at $BASE" >&2; exit 2; }
BASE=$where
[ -d "$BASE/k3diff" ] || { echo "gpu_memory_check: $BASE holds no k3diff" >&2; exit 2; }
for lane in $LANES; do
  case $lane in memory|throughput) ;; *) echo "gpu_memory_check: unknown lane '$lane' (memory, throughput)" >&2; exit 2;; esac
done
SEED=${SEED:-1}; BACKEND=${BACKEND:-torch-blocked}; DEVICE=${DEVICE:-cuda}; REPEAT=${REPEAT:-2}
SMALL_CASES=${SMALL_CASES:-48}; FULL_CASES=${FULL_CASES:-6}; LANE_TIMEOUT=${LANE_TIMEOUT:-1800}
STAGES=${STAGES:-moe,mla,kda,layer}; FULL_STAGES=${FULL_STAGES:-moe,mla}
PROFILE=ci; SMALL=(--preset small); FULL=(--preset full --keep-preset full)
if [ "${GPU_MEMORY_DRY:-0}" = 1 ]; then
  DEVICE=cpu; PROFILE=quick; SMALL_CASES=2; FULL_CASES=0; SMALL=(); REPEAT=1; STAGES=moe
fi
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
SUMMARY=$OUT/summary.txt
say() { echo "$*" | tee -a "$SUMMARY"; }
: >"$SUMMARY"
say "gpu_memory_check: this tree $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo +modified) vs base $BASE; device $DEVICE; backend $BACKEND; seed $SEED; profile $PROFILE$([ "${GPU_MEMORY_DRY:-0}" = 1 ] && echo '; DRY (CPU, toy size: not a measurement)')"
status=0

# the GPU's used memory every half second, while $1 runs (where nvidia-smi exists)
sample_gpu() {
  local file=$1; shift
  if command -v nvidia-smi >/dev/null && [ "$DEVICE" != cpu ]; then
    (while :; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2>/dev/null | head -1 >>"$file"
                 nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null \
                   | sed 's/^/app /' >>"$file"; sleep 0.5; done) &
    local sampler=$!
    "$@"; local rc=$?
    kill "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
    return $rc
  fi
  "$@"
}

memory_side() {   # memory_side NAME TREE PYTHONPATH
  local name=$1 tree=$2 path=$3 dir=$OUT/memory-$1
  mkdir -p "$dir/probe"; rm -f "$dir"/probe/*.json "$dir/gpu.txt" "$dir/results.jsonl"
  ( cd "$tree" && sample_gpu "$dir/gpu.txt" env PYTHONPATH="$ROOT/scripts/memory_probe:$path${PYTHONPATH:+:$PYTHONPATH}" \
      K3DIFF_MEMORY_PROBE="$dir/probe" timeout "$LANE_TIMEOUT" \
      "$PY" -m pytest -p k3diff.plugin tests/differential --k3diff -q -p no:cacheprovider -p no:randomly \
      -k "fuzz and moe" --k3diff-device "$DEVICE" --k3diff-profile "$PROFILE" --k3diff-seed "$SEED" \
      --k3diff-backend "$BACKEND" --k3diff-report "$dir/results.jsonl" --k3diff-save "$dir/seeds" ) >"$dir/pytest.log" 2>&1
  echo $? >"$dir/exit"
  "$PY" - "$name" "$dir" <<'EOF' | tee -a "$SUMMARY"
import json, pathlib, sys
name, d = sys.argv[1], pathlib.Path(sys.argv[2])
recs = []
for line in (d / "results.jsonl").read_text().splitlines() if (d / "results.jsonl").exists() else []:
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r.get("kind") == "case":
        recs.append(r)
full = [r for r in recs if (r.get("case") or {}).get("preset") == "full"]
large = lambda rs: sum(1 for r in rs if str(r.get("skipped") or "").startswith("case too large"))  # noqa: E731
judged = lambda rs: sum(1 for r in rs if not r.get("skipped"))  # noqa: E731
failed = sum(1 for r in recs if not r.get("ok") and not r.get("skipped"))
print(f"memory {name}: exit {(d / 'exit').read_text().strip()}; {len(recs)} cases, {judged(recs)} judged, "
      f"{failed} failed; full dims: {len(full)} cases, {judged(full)} judged, TOO_LARGE {large(recs)} "
      f"({large(full)} of them full dims)")
for r in [r for r in recs if str(r.get("skipped") or "").startswith("case too large")][:3]:
    print(f"  e.g. {r['skipped'][:160]}")
G = 2 ** 30
for f in sorted((d / "probe").glob("*.json")):
    p = json.loads(f.read_text())
    gpu = (f"peak reserved {p['peak_reserved'] / G:.2f} GiB (allocated {p['peak_allocated'] / G:.2f}, "
           f"still reserved at the last look {p['reserved'] / G:.2f})" if "peak_reserved" in p else "no CUDA context")
    print(f"  {name} {p['role']:6} pid {p['pid']}: {gpu}; peak RSS {p['peak_rss'] / G:.2f} GiB")
gpu = [int(x) for x in (d / "gpu.txt").read_text().split("\n") if x.strip().isdigit()] if (d / "gpu.txt").exists() else []
apps = {}
for line in (d / "gpu.txt").read_text().splitlines() if (d / "gpu.txt").exists() else []:
    if line.startswith("app "):
        pid, mib = (v.strip() for v in line[4:].split(","))
        if mib.isdigit():
            apps[pid] = max(apps.get(pid, 0), int(mib))
if gpu:
    print(f"  {name} nvidia-smi: GPU used at most {max(gpu) / 1024:.2f} GiB; per process at most "
          + (", ".join(f"pid {p} {m / 1024:.2f} GiB" for p, m in sorted(apps.items())) or "(no process listed)"))
print(f"TOO_LARGE {name} {large(recs)}", file=open(d / "too_large", "w"))
EOF
}

if [[ " $LANES " == *" memory "* ]]; then
  say "== memory: pytest -k 'fuzz and moe' --k3diff-profile $PROFILE --k3diff-seed $SEED, each tree"
  memory_side now "$ROOT" "$ROOT"
  base_path=$BASE; [ "$BACKEND" = megakernel ] && base_path=$BASE:$ROOT
  memory_side base "$BASE" "$base_path"
  now=$(awk '{print $3}' "$OUT/memory-now/too_large" 2>/dev/null); base=$(awk '{print $3}' "$OUT/memory-base/too_large" 2>/dev/null)
  if [ -z "$now" ] || [ -z "$base" ]; then
    say "memory: RED, a side wrote no results (see $OUT/memory-*/pytest.log)"; status=1
  elif [ "$now" -gt "$base" ]; then
    say "memory: RED, this tree skipped $now case(s) as too large, the base tree $base"; status=1
  else
    say "memory: green, too-large skips: this tree $now, base tree $base"
  fi
fi

if [[ " $LANES " == *" throughput "* ]]; then
  say "== throughput: the same cases through each tree's isolated checker (--isolate on), $REPEAT runs a side, alternated"
  export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
  runs=("small ${SMALL[*]} --stages $STAGES --cases $SMALL_CASES")
  [ "$FULL_CASES" -gt 0 ] && runs+=("full ${FULL[*]} --stages $FULL_STAGES --cases $FULL_CASES")
  for run in "${runs[@]}"; do
    read -r label args <<<"$run"
    # shellcheck disable=SC2086 # args is a list of words by design
    sample_gpu "$OUT/throughput-$label-gpu.txt" timeout "$LANE_TIMEOUT" "$PY" -m k3diff.tools.throughput \
      --device "$DEVICE" --backend "$BACKEND" --isolate on --compare-with "$BASE" --repeat "$REPEAT" $args \
      >"$OUT/throughput-$label.log" 2>&1
    rc=$?
    say "-- preset $label ($args): exit $rc"
    grep -E '^(stage|moe|mla|kda|layer) ' "$OUT/throughput-$label.log" | tee -a "$SUMMARY"
    # exit 1 with every differing row "DIFFERENT (outcomes same)": the two judges report differently
    # (this tree judges more), every case passes, fails or skips alike: not red
    if [ $rc -ne 0 ] && ! { [ $rc -eq 1 ] && grep -qE '^(moe|mla|kda|layer) ' "$OUT/throughput-$label.log" \
                             && ! grep -qE 'DIFFERENT$' "$OUT/throughput-$label.log"; }; then
      status=1; tail -5 "$OUT/throughput-$label.log" | tee -a "$SUMMARY"
    fi
  done
fi
say "gpu_memory_check: exit $status"
exit $status
