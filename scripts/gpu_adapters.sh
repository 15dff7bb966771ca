#!/usr/bin/env bash
# One device call (H200, <= 10 min): the public-library adapters `fla` (KDA on fla-core 0.6.0) and
# `flashinfer` (MLA on flashinfer-python 0.7.4) judged by k3diff, plus the measurements that set
# their `deterministic` / `batch_invariant` claims and a decode-step timing against torch.
# From the repo root, with `.whl` carried:
#   .whl/fla_core-0.6.0-py3-none-any.whl
#   .whl/apache_tvm_ffi-0.1.15.post2-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl
#   .whl/flashinfer-0.7.4-mla.tar.xz  (flashinfer-python 0.7.4's wheel contents, data/csrc trimmed to
#                                      its top-level sources: the MLA JIT needs no subfolder there)
# Writes to $OUT (at most 8 files): adapters.log, fla_kda_cases.jsonl, flashinfer_mla_cases.jsonl,
# fla_probe.json, flashinfer_probe.json. Each step has a time limit, so the logs always come back.
# PART=fla or PART=flashinfer runs one half (default: both, the fla half first).
# EXTRA=1 also runs (when time is left): fla in its other slot/layout modes, flashinfer with
# FlashInfer's own backend choice ("auto": FA3 on Hopper), and the `layer` stage of both.
set -uo pipefail
OUT=${OUT:-/tmp/k3diff-out}; mkdir -p "$OUT"
SEED=${K3DIFF_SEED:-20261130}
BUDGET=${BUDGET:-570}            # seconds for the whole script
LOG="$OUT/adapters.log"
exec > >(tee -a "$LOG") 2>&1
step() { echo; echo "=== [$SECONDS s] $*"; }
left() { echo $((BUDGET - SECONDS)); }
# run STEP_LIMIT CMD...: run with a time limit no larger than what is left of the budget
run() { local lim=$1; shift; local l; l=$(left); [ "$l" -lt 20 ] && { echo "SKIPPED (budget spent)"; return 0; }
        [ "$lim" -gt "$l" ] && lim=$l; timeout "$lim" "$@"; local rc=$?; [ $rc -eq 124 ] && echo "TIMED OUT after ${lim}s"; return $rc; }

step "0. install the carried packages"
SITE=/tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $SITE .whl/*.whl || exit 1
tar -xJf .whl/flashinfer-0.7.4-mla.tar.xz -C $SITE || exit 1
export PYTHONPATH=$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}
export MAX_JOBS=${MAX_JOBS:-16} PYTHONUNBUFFERED=1
python3 - <<'EOF'
import torch, triton
print("torch", torch.__version__, "cuda", torch.version.cuda, "triton", triton.__version__,
      "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
from k3diff.backends import fla_kda, flashinfer_mla
print("fla", fla_kda.fla_version(), "| flashinfer", flashinfer_mla.flashinfer_version())
for name, mod in (("fla", fla_kda), ("flashinfer", flashinfer_mla)):
    print(f"{name} available:", mod.missing_reason() or "yes")
EOF
nvcc --version | tail -1

# -p k3diff.plugin unless an installed k3diff already registers the plugin (pytest11 entry point)
PLUGIN="-p k3diff.plugin"
python3 -c "import importlib.metadata as m, sys; sys.exit(0 if any(e.name == 'k3diff' for e in m.entry_points(group='pytest11')) else 1)" && PLUGIN=""
PYTEST="python3 -m pytest $PLUGIN tests/differential --k3diff --k3diff-seed $SEED -q -p no:cacheprovider"

PART=${PART:-all}
if [ "$PART" = all ] || [ "$PART" = fla ]; then
step "1. fla: pytest --k3diff -k kda (ci profile)"
run 170 $PYTEST --k3diff-backend fla -k kda --k3diff-profile ci --k3diff-report "$OUT/fla_kda_cases.jsonl" 2>&1 | tail -25

step "2. fla: determinism / batch invariance / decode-step time vs torch-blocked"
run 80 python3 scripts/adapter_probe.py --backend fla --stage kda --out "$OUT/fla_probe.json"
fi

if [ "$PART" = all ] || [ "$PART" = flashinfer ]; then
step "3. flashinfer: JIT build of the MLA kernel (first use), then pytest --k3diff -k mla (ci profile)"
run 240 python3 - <<'EOF'
import time, torch
from k3diff.case import Case
from k3diff.runner import check_case
from k3diff import backends
b = backends.load("flashinfer")
t0 = time.perf_counter()
v = check_case(Case(stage="mla", preset="small", batch=3, cache_lens=(0, 5, 70)), b, device="cuda")
print(f"first flashinfer case (JIT build included) {time.perf_counter() - t0:.1f} s:", v.headline(),
      "| plan", b.attend.last_plan)
for line in v.failures()[:5]:
    print("  ", line)
EOF
run 200 $PYTEST --k3diff-backend flashinfer -k mla --k3diff-profile ci --k3diff-report "$OUT/flashinfer_mla_cases.jsonl" 2>&1 | tail -25

step "4. flashinfer: determinism / batch invariance / decode-step time vs torch-blocked"
run 80 python3 scripts/adapter_probe.py --backend flashinfer --stage mla --out "$OUT/flashinfer_probe.json"
fi

if [ "${EXTRA:-0}" = 1 ]; then
  step "5. fla, public API on gathered slots, FLA's [K, V] state layout (quick)"
  run 60 env K3DIFF_FLA_SLOTS=gather K3DIFF_FLA_STATE=kv $PYTEST --k3diff-backend fla -k "fuzz and kda" 2>&1 | tail -4
  step "6. flashinfer with FlashInfer's own backend choice (auto; quick)"
  run 120 env K3DIFF_FLASHINFER_MLA_BACKEND=auto $PYTEST --k3diff-backend flashinfer -k "fuzz and mla" 2>&1 | tail -4
  step "7. layer stage (quick): KDA layers through fla, MLA layers through flashinfer"
  run 60 $PYTEST --k3diff-backend fla -k "fuzz and layer" 2>&1 | tail -4
  run 60 $PYTEST --k3diff-backend flashinfer -k "fuzz and layer" 2>&1 | tail -4
fi

step "done in $SECONDS s; claims measured:"
python3 -c "
import json
for n in ('fla', 'flashinfer'):
    try:
        print(n, json.load(open('$OUT/' + n + '_probe.json'))['claims'])
    except Exception as e:
        print(n, 'no probe result:', e)
"
ls -la "$OUT"
