#!/usr/bin/env bash
# Every hole found in the verdict and the run, re-run as a user would (CPU, the built-in
# candidate and the deliberately wrong ones in tests/k3diff), one row each:
#   hole | the command's exit status | the line it prints that shows the hole closed.
# The tests (tests/k3diff/test_numerics_holes.py, test_isolation.py, test_plugin.py) assert the
# same things; this prints them for a reviewer. From the project root, k3diff installed:
#   bash scripts/verdict_holes.sh            (about 3 minutes on 2 cores)
set -uo pipefail
ROOT=$PWD
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export PYTHONPATH=$ROOT:$ROOT/tests/k3diff${PYTHONPATH:+:$PYTHONPATH}
K=(python -m pytest "$ROOT/tests/differential" --k3diff -q -p no:cacheprovider -p no:randomly --rootdir "$ROOT")
seed() {   # a seed file of one moe case of batch $1
  echo "{\"k3diff_seed_format\": 1, \"case\": {\"stage\": \"moe\", \"version\": 1, \"batch\": $1 $2}}" > "$W/$3.json"
  echo "$W/$3.json"
}
row() {    # row LABEL PATTERN CMD...: exit status and the first output line matching PATTERN
  local label=$1 pat=$2; shift 2
  local out; out=$(cd "$W" && "$@" 2>&1); local rc=$?
  # the part that says it: from "ERROR"/"contract:" on when the line is a long case title
  local line; line=$(grep -m1 -E -- "$pat" <<<"$out" | sed -E 's/^ *//; s/^FAIL .*(ERROR (crash|hang):)/\1/; s/^FAIL .*(contract:)/\1/' | cut -c1-160)
  line=${line//|/\\|}                # a | inside a cell would break the markdown table
  printf '| %s | %s | %s |\n' "$label" "$rc" "${line:-(no line matching /$pat/)}"
}
crash_followup() {   # the seeds the crash run saved, and how that run ended
  local n; n=$(ls "$W"/crash/*.json | wc -l)
  local b; b=$(python -c "import json,glob,sys; print(json.load(open(glob.glob(sys.argv[1] + '/*.json')[0]))['case']['batch'])" "$W/crash")
  echo "$n seed saved, of batch $b; the run: $("${K[@]}" --k3diff-backend crashing_candidates:Segfault -k 'fuzz and moe' --k3diff-seed 7 | tail -1)"
}
echo "| hole (Why) | exit | what it prints now |"
echo "|---|---|---|"
row "zeros / half-scale / sign-flip on small outputs" "mutation score" \
  python -m k3diff.cli mutants --only zeros_when_small,half_scale_on_tiny,sign_flip_on_tiny,half_scale_output
row "  ... how zeros_when_small is caught" "^zeros_when_small" python -m k3diff.cli mutants --only zeros_when_small
row "value distributions reach states and caches" "tiny" python -c "
from reference.config import preset; from reference import materialize as m
cfg = preset('tiny'); out = []
for st, kw, names in (('kda', dict(batch=4, n_slots=5), ('conv_state', 'recurrent_state')), ('mla', dict(batch=4, cache_lens=[5, 7, 9, 11]), ('kv_cache',))):
    p = m.make_inputs(cfg, st, 2, value_dist='plain', **kw)
    for d in ('tiny', 'large'):
        o = m.make_inputs(cfg, st, 2, value_dist=d, **kw)
        for n in names:
            a, b = p[n].double(), o[n].double(); ok = a.isfinite()
            out.append(f'{st}.{n} {d}/plain {float(b[ok].abs().mean() / a[ok].abs().mean()):.3g}')
print('mean |value| ratio: ' + '; '.join(out))"
row "untouched slots / free cache rows: a written NaN shows" "mutation score" \
  python -m k3diff.cli mutants --only writes_nan_to_unused_slot,writes_nan_to_free_cache_rows
row "a crash (SIGSEGV on batch 3) during fuzzing" "crash:" "${K[@]}" --k3diff-backend crashing_candidates:Segfault \
  -k "fuzz and moe" --k3diff-seed 7 --k3diff-save "$W/crash"
row "  ... the run went on; the seed saved unshrunk" "saved" crash_followup
row "  ... the saved seed replays the crash" "crash:" bash -c "python -m k3diff.cli replay $W/crash/*.json --backend crashing_candidates:Segfault"
row "a hang (batch 3), --timeout 5" "hang:" python -m k3diff.cli replay "$(seed 3 '' hang)" --backend crashing_candidates:Hang --timeout 5
row "provides() without the final output" "lacks" "${K[@]}" --k3diff-backend crashing_candidates:NoFinalOutput
row "outputs in the wrong dtype (float64)" "dtype|FAIL" python -m k3diff.cli replay "$(seed 2 '' dt)" --backend crashing_candidates:ReallocatesOutput
row "--k3diff-save /proc/nope" "nope" "${K[@]}" --k3diff-save /proc/nope
row "--k3diff-report /nonexistent/dir/x.jsonl" "nonexistent" "${K[@]}" --k3diff-report /nonexistent/dir/x.jsonl
row "a killed run keeps its report (KILL after 25 s)" "case lines" bash -c "timeout -s KILL 25 ${K[*]} -k kda --k3diff-profile nightly --k3diff-report $W/killed.jsonl >/dev/null 2>&1; echo \"\$(grep -c '\"kind\": \"case\"' $W/killed.jsonl) case lines in the report of the killed run\""
mkdir -p "$W/existing"
row "--k3diff-save DIR (space form) keeps the rootdir" "space form" bash -c "cd $ROOT && echo \"space form: \$(python -m pytest --k3diff --k3diff-save $W/existing --co -q -p no:cacheprovider | tail -1); = form: \$(python -m pytest --k3diff --k3diff-save=$W/existing --co -q -p no:cacheprovider | tail -1)\""
row "a backend whose __init__ raises" "RaisesInInit|raise" "${K[@]}" --k3diff-backend crashing_candidates:RaisesInInit
row "a backend whose available() raises" "RaisesInAvailable|raise" "${K[@]}" --k3diff-backend crashing_candidates:RaisesInAvailable
row "--k3diff-device cuda on a CPU box" "cuda" "${K[@]}" --k3diff-device cuda
row "k3diff replay of a folder without seeds" "seed" python -m k3diff.cli replay "$W/existing"
row "a float batch in a seed" "batch" python -m k3diff.cli replay "$(seed 2.5 '' fb)"
row "a huge seed" "seed must" python -m k3diff.cli replay "$(seed 2 ', "seed": 1000000000000000000000000000000' hs)"
row "a NaN weight seed" "weight_seed" python -m k3diff.cli replay "$(seed 2 ', "weight_seed": NaN' nw)"
row "rms_eps = inf" "rms_eps" python -m k3diff.cli replay "$(seed 2 ', "overrides": [["rms_eps", Infinity]]' eps)"
cp "$(ls "$ROOT"/corpora/regressions/moe-*.json | head -1)" "$W/edited.json"
sed -i 's/"stage": "moe"/"stage": "kda"/' "$W/edited.json"
row "a seed edited to another stage" "edited|does not match|refused" python -m k3diff.cli replay "$W/edited.json"
row "the shipped regression seeds on a correct backend" "reproduced|seed" bash -c "python -m k3diff.cli replay $ROOT/corpora/regressions | grep -c 'reproduced the recorded outcome' | sed 's/$/ seeds reproduced their recorded outcome/'; ls $ROOT/corpora/regressions/*.json | wc -l | sed 's/$/ seeds shipped/'"
row "a batch-invariance failure gets a seed file" "seed|saved" bash -c "${K[*]} --k3diff-backend crashing_candidates:BatchDependent -k 'batch_invariance and moe' --k3diff-seed 3 --k3diff-save $W/inv >/dev/null 2>&1; ls $W/inv | sed 's/^/saved seed /'"
row "the fail column counts distinct cases" "^stage" bash -c "${K[*]} --k3diff-backend broken_candidate:BiasInWeights -k 'fuzz and moe' --k3diff-seed 5 | grep -A1 '^stage ' | awk '{print \$1, \$2, \$3, \$4, \$5}' | paste -sd' '"
row "--k3diff-shard 1/2 without --k3diff-seed" "shard" "${K[@]}" --k3diff-shard 1/2
