#!/usr/bin/env bash
# Every known attack on k3diff, re-run as a user would, one markdown row each:
#   attack | the command | its exit status | the one line that shows the outcome.
# Table 1: a candidate or a seed file trying to make k3diff say "pass", run code of its choosing,
# hang it or leave processes behind. Table 2: a candidate, a shard or a compare that judged
# nothing must never read as a pass, and a verdict must blame the right party (none of its rows
# may be exit 0). The tests (tests/k3diff/test_attacks.py) assert the same; this prints them for
# a reviewer. From the project root, k3diff installed (about 15 minutes on 2 cores):
#   bash scripts/attacks.sh        (ATTACKS_TABLE=2 bash scripts/attacks.sh: the second table alone)
set -uo pipefail
ROOT=$PWD
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
export PYTHONPATH=$ROOT:$ROOT/tests/k3diff:$W${PYTHONPATH:+:$PYTHONPATH}
P=(python -m pytest "$ROOT/tests/differential" --k3diff -q -p no:cacheprovider -p no:randomly --rootdir "$ROOT"
   --k3diff-save "$W/seeds")
C=(python -m k3diff.cli)
seed() {   # seed NAME [EXTRA JSON FIELDS]: a seed file of one moe case of batch 1
  echo "{\"k3diff_seed_format\": 1, \"case\": {\"stage\": \"moe\", \"version\": 1, \"batch\": 1}${2:-}}" > "$W/$1.json"
  echo "$W/$1.json"
}
row() {    # row ATTACK PATTERN CMD...: the command, its exit status, the first line matching PATTERN
  local label=$1 pat=$2; shift 2
  local run=(timeout 300); declare -F "$1" >/dev/null && run=()     # a helper below runs as it is
  local out; out=$(cd "$W" && "${run[@]}" "$@" 2>&1); local rc=$?
  # the part that says it: from "k3diff:"/"ERROR:"/"crash:" on, the scratch folder's name dropped
  local line; line=$(grep -m1 -E -- "$pat" <<<"$out" | sed -E "s#$W/##g; s/^ *//; s/^.*(k3diff: |ERROR: |crash: |hang: )/\1/" | cut -c1-150)
  local cmd="$*"; cmd=${cmd//$W\//}; cmd=${cmd//$ROOT\//}; cmd=${cmd//python -m k3diff.cli/k3diff}
  cmd=${cmd//python -m pytest tests\/differential --k3diff -q -p no:cacheprovider -p no:randomly --rootdir $ROOT --k3diff-save seeds/pytest --k3diff}
  line=${line//|/\\|}; cmd=${cmd//|/\\|}
  line=${line//$'\x1b'/'\e'}; cmd=${cmd//$'\x1b'/'\e'}     # a file name's escape never reaches the terminal
  printf '| %s | `%s` | %s | %s |\n' "$label" "$(cut -c1-110 <<<"$cmd")" "$rc" "${line:-(no line matching /$pat/)}"
}
term_while_hanging() {   # SIGTERM to CMD once its candidate runs; then what is left of the candidate's group
  rm -f "$W/pids"
  (cd "$W" && K3DIFF_TEST_PIDFILE=$W/pids exec "$@") >/dev/null 2>&1 & local pid=$!
  for _ in $(seq 600); do [ -s "$W/pids" ] && break; sleep 0.2; done
  local pgid; pgid=$(cut -d' ' -f1 "$W/pids")
  kill -TERM "$pid"; wait "$pid"; local rc=$?
  sleep 1
  local left; left=$(ps -e -o pgid=,stat= | awk -v g="$pgid" '$1 == g && $2 !~ /^Z/' | wc -l)
  echo "exit $rc; $left live process(es) left in the candidate's group $pgid"
}
children_after() {   # a passing run of a candidate that forks: what is left of its group
  rm -f "$W/pids"
  K3DIFF_TEST_PIDFILE=$W/pids "$@" >/dev/null 2>&1; local rc=$?
  sleep 1
  local pgid; pgid=$(cut -d' ' -f1 "$W/pids")
  local left; left=$(ps -e -o pgid=,stat= | awk -v g="$pgid" '$1 == g && $2 !~ /^Z/' | wc -l)
  echo "exit $rc; $left live process(es) left in the candidate's group $pgid"
}
printf 'import ctypes\nctypes.string_at(0)\n' > "$W/segv_at_import.py"
printf 'import time\ntime.sleep(300)\n' > "$W/sleep_at_import.py"
printf 'raise RuntimeError("no GPU here")\n' > "$W/raise_at_import.py"
printf 'def (:\n' > "$W/syntax_at_import.py"
printf 'import sys\nsys.exit(0)\n' > "$W/exit_at_import.py"
mkdir -p "$W/dir" "$W/withdir/x.json" "$W/odd"
cp "$(seed good)" "$W/dir/good.json"; cp "$W/good.json" "$W/withdir/good.json"; cp "$(seed evil ', "backend": "evil_module:Thing"')" "$W/dir/evil.json"
ln -s "$W/odd/loop.json" "$W/odd/loop.json"; mkfifo "$W/odd/fifo.json"
python -c "print('[' * 100000 + ']' * 100000)" > "$W/deep.json"
seed one >/dev/null; sed 's/"batch": 1/"batch": 3/' "$W/one.json" > "$W/b3.json"

if [ "${ATTACKS_TABLE:-all}" != 2 ]; then      # ATTACKS_TABLE=2: the second table alone
echo "| attack: a fake pass, code of a seed's choosing, a hang, an orphan | command | exit | outcome |"
echo "|---|---|---|---|"
row "wrong output, then sys.exit(0) in run(): replay" "crash:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:WrongThenExit
row "  ... isolation off" "crash:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:WrongThenExit --isolate off
row "  ... under pytest (seed saved)" "crash:" "${P[@]}" --k3diff-backend crashing_candidates:WrongThenExit -k "fuzz and moe" --k3diff-seed 1
row "a seed's backend \"sys:exit\"" "k3diff:" "${C[@]}" replay "$(seed sysexit ', "backend": "sys:exit"')"
row "a seed's backend \"os:abort\"" "k3diff:" "${C[@]}" replay "$(seed abort ', "backend": "os:abort"')"
row "a seed's backend 123" "k3diff:" "${C[@]}" replay "$(seed num ', "backend": 123')"
row "supports() refuses every case: pytest" "nothing judged" "${P[@]}" --k3diff-backend crashing_candidates:RefusesEverything -k "moe" --k3diff-seed 1
row "  ... k3diff hunt" "nothing judged" "${C[@]}" hunt --backend crashing_candidates:RefusesEverything --examples 4
row "  ... the invariance check honours supports()" "nothing judged" "${P[@]}" --k3diff-backend crashing_candidates:RefusesEverything -k "batch_invariance and moe" --k3diff-seed 1
row "segfault at import: pytest" "ERROR|SIGSEGV" "${P[@]}" --k3diff-backend segv_at_import:X
row "  ... k3diff" "SIGSEGV" "${C[@]}" hunt --backend segv_at_import:X
row "sleep at import, timeout 5: pytest" "did not" "${P[@]}" --k3diff-backend sleep_at_import:X --k3diff-timeout 5
row "  ... k3diff" "did not" "${C[@]}" replay "$W/one.json" --backend sleep_at_import:X --timeout 5
row "raise at import" "ERROR|k3diff:" "${P[@]}" --k3diff-backend raise_at_import:X
row "SyntaxError at import" "ERROR|k3diff:" "${P[@]}" --k3diff-backend syntax_at_import:X
row "sys.exit at import" "ERROR|k3diff:" "${P[@]}" --k3diff-backend exit_at_import:X
row "--k3diff-backend sys:exit" "ERROR" "${P[@]}" --k3diff-backend sys:exit
row "--k3diff-backend :" "ERROR" "${P[@]}" --k3diff-backend :
row "--k3diff-backend :Foo" "ERROR" "${P[@]}" --k3diff-backend :Foo
row "stages = None" "ERROR" "${P[@]}" --k3diff-backend crashing_candidates:NoStageList
row "a raising prepare()" "crash:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:RaisesInPrepare
row "KeyboardInterrupt inside the candidate (batch 3)" "crash:" "${C[@]}" replay "$W/b3.json" --backend crashing_candidates:InterruptsItself
row "  ... under pytest (seed saved)" "crash:" "${P[@]}" --k3diff-backend crashing_candidates:InterruptsItself -k "fuzz and moe" --k3diff-seed 5
row "SIGTERM to pytest, candidate hung with a grandchild" "exit" term_while_hanging "${P[@]}" --k3diff-backend crashing_candidates:SpawnsAndHangs -k "fuzz and moe"
row "SIGTERM to k3diff replay, same candidate" "exit" term_while_hanging "${C[@]}" replay "$W/one.json" --backend crashing_candidates:SpawnsAndHangs
row "a hang's own subprocess, --timeout 5" "exit" children_after "${C[@]}" replay "$W/one.json" --backend crashing_candidates:SpawnsAndHangs --timeout 5
row "a candidate that forks, passing run" "exit" children_after "${P[@]}" --k3diff-backend crashing_candidates:ForksAndPasses -k "fuzz and moe" --k3diff-seed 1
row "replay DIR, one seed naming an unknown backend" "k3diff:|PASS" bash -c "${C[*]} replay $W/dir 2>&1 | grep -E 'k3diff:|PASS' | sed 's#$W/##' | cut -c1-70 | paste -sd' '; exit \${PIPESTATUS[0]}"
row "replay DIR holding a folder named x.json" "k3diff:|PASS" bash -c "${C[*]} replay $W/withdir 2>&1 | grep -E 'k3diff:|PASS' | sed 's#$W/##' | cut -c1-70 | paste -sd' '; exit \${PIPESTATUS[0]}"
row "a symlink loop" "k3diff:" "${C[@]}" replay "$W/odd/loop.json"
row "a FIFO named fifo.json" "k3diff:" "${C[@]}" replay "$W/odd/fifo.json"
row "/dev/zero" "k3diff:" "${C[@]}" replay /dev/zero
row "deeply nested JSON" "k3diff:" "${C[@]}" replay "$W/deep.json"
row "environment of the wrong type" "k3diff:" "${C[@]}" replay "$(seed env ', "environment": [1]')"
row "verdict of the wrong type" "k3diff:" "${C[@]}" replay "$(seed verdict ', "verdict": "ok"')"
row "--k3diff-timeout inf" "ERROR" "${P[@]}" --k3diff-timeout inf
row "k3diff replay --timeout 0" "error" "${C[@]}" replay "$W/one.json" --timeout 0
row "k3diff replay --timeout -5" "error" "${C[@]}" replay "$W/one.json" --timeout -5
row "k3diff hunt --timeout 0" "error" "${C[@]}" hunt --backend torch-blocked --timeout 0
row "two runs share one --k3diff-report" "ERROR" bash -c "${P[*]} -k 'fuzz and kda' --k3diff-profile nightly --k3diff-report $W/shared.jsonl >/dev/null 2>&1 & first=\$!; sleep 15; ${P[*]} -k 'fuzz and moe' --k3diff-report $W/shared.jsonl; rc=\$?; kill -TERM \$first; wait; exit \$rc"
row "a full disk under --k3diff-report (/dev/full)" "k3diff:" "${P[@]}" --k3diff-report /dev/full --k3diff-replay "$W/one.json" -k one --k3diff-isolate off
row "k3diff hunt --examples 0" "error" "${C[@]}" hunt --backend torch-blocked --examples 0
row "k3diff mutants --only ," "k3diff:" "${C[@]}" mutants --only ,
row "stdout closed (broken pipe)" "k3diff:" bash -c "${C[*]} budgets | true; exit \${PIPESTATUS[0]}"
row "stdout on a full disk" "k3diff:" bash -c "${C[*]} budgets > /dev/full"
row "replay of the .inflight-<pid>.json a killed run left" "PASS|FAIL|k3diff:" "${C[@]}" replay "$(echo '{"case": {"stage": "moe", "version": 1, "batch": 1}, "kind": "case", "position": null, "backend": "torch-blocked", "device": "cpu", "started": 0}' > "$W/.inflight-1.json"; echo "$W/.inflight-1.json")"
row "--pyargs k3diff.suite from another folder" "collected|corpora" bash -c "mkdir -p $W/elsewhere && cd $W/elsewhere && python -m pytest --pyargs k3diff.suite --k3diff --co -q -p no:cacheprovider -k test_seed | tail -1; ls -A | grep -v .benchmarks | sed 's/^/left behind: /'"
fi

# ---------------------------------------------------------------- table 2
shard() {  # shard DIR NAME EXTRA...: a nightly shard's results file DIR/results-NAME.jsonl (its exit status printed)
  local dir=$1 name=$2; shift 2; mkdir -p "$dir"
  (cd "$W" && timeout 300 "${P[@]}" --k3diff-report "$dir/results-$name.jsonl" "$@" >/dev/null 2>&1); echo "shard $name exit $?"
}
show_check() {   # k3diff show FILE: its replay line, and how many raw escape bytes reached the terminal
  local out; out=$("${C[@]}" show "$1" 2>&1); local rc=$?
  echo "$(grep -c $'\x1b' <<<"$out") raw ESC line(s); $(grep -m1 '^replay:' <<<"$out")"; return $rc
}
note_where() {   # k3diff replay of a hanging candidate: where its in-flight note is, while the case runs
  rm -f "$W/pids"; mkdir -p "$W/tmp"
  (cd "$W" && TMPDIR=$W/tmp K3DIFF_TEST_PIDFILE=$W/pids exec "$@") >/dev/null 2>&1 & local pid=$!
  for _ in $(seq 600); do [ -s "$W/pids" ] && break; sleep 0.2; done
  local found; found=$(cd "$W" && find . -name ".inflight-$pid.json" | paste -sd' ')     # this run's own
  kill -TERM "$pid"; wait "$pid"
  echo "in-flight note at: ${found:-nowhere}"
}
planted() {      # planted KIND: a link to a victim file at the name k3diff writes; is the victim intact?
  python - "$1" "$W/planted" <<'PY'
import os, sys
from pathlib import Path
kind, root = sys.argv[1], Path(sys.argv[2])
root.mkdir(exist_ok=True)
victim = root / "victim"
victim.write_text("precious")
from k3diff.case import Case
case = Case("moe", batch=1)
if kind == "seed":
    from k3diff.corpus import case_id, save
    (root / f"moe-{case_id(case)}.json").symlink_to(victim)
    save(case, {"ok": False}, root, "torch-blocked")
else:
    from k3diff.isolation import IsolatedChecker
    checker = IsolatedChecker("torch-blocked", device="cpu", inflight_dir=root)
    for p in (checker.inflight_path, checker.inflight_path.with_suffix(".tmp")):
        p.symlink_to(victim)
    try:
        checker.check(case)
    finally:
        checker.close()
print("victim file " + ("intact" if victim.read_text() == "precious" else "OVERWRITTEN through the link"))
PY
}
printf 'import os\nos._exit(0)\n' > "$W/exit0_at_import.py"
printf 'not json' > "$W/notjson.json"
N=$(python -c "from reference.config import preset; print(preset('tiny').n_experts)")
python - "$W/ep9.json" "$N" <<'PY'
import json, sys
path, n = sys.argv[1], int(sys.argv[2])
case = {"stage": "moe", "version": 1, "batch": 2, "ep_ranks": 9, "ep_placement": "contiguous", "ep_owners": [e % 9 for e in range(n)]}
json.dump({"k3diff_seed_format": 1, "case": case}, open(path, "w"))
PY
python - "$W/evil.json" "$W/evil "$'\x1b'"[31mname.json" <<'PY'
import json, sys
record = {"k3diff_seed_format": 1, "case": {"stage": "moe", "version": 1, "batch": 1},
          "backend": "torch-blocked\x1b]0;owned\x07", "replay": "rm -rf ~; k3diff replay x",
          "verdict": {"ok": False, "reports": []}}
for path in sys.argv[1:]:
    json.dump(record, open(path, "w"))
PY
# the nightly's shards (seed 5; one seed file each, so a shard is a few seconds), and the ways a
# shard earns nothing: its backend does not load, it judges nothing, it reads a bad seed, it is
# there twice, it ran another seed
SH=(--k3diff-isolate off --k3diff-seed 5)
shard "$W/ok" 1 "${SH[@]}" --k3diff-replay "$W/one.json" -k one.json
shard "$W/ok" 2 "${SH[@]}" --k3diff-replay "$W/b3.json" -k b3.json
for bad in load nothing seed dup other; do mkdir -p "$W/n-$bad/a"; cp "$W/ok/results-1.jsonl" "$W/n-$bad/a/"; done
shard "$W/n-load/b" 2 "${SH[@]}" --k3diff-backend raise_at_import:X
shard "$W/n-nothing/b" 2 "${SH[@]}" --k3diff-backend crashing_candidates:RefusesEverything --k3diff-replay "$W/b3.json" -k b3.json
shard "$W/n-seed/b" 2 "${SH[@]}" --k3diff-replay "$W/notjson.json" -k notjson
mkdir -p "$W/n-dup/b" "$W/n-dup/c"; cp "$W/ok/results-2.jsonl" "$W/n-dup/b/"; cp "$W/ok/results-2.jsonl" "$W/n-dup/c/"
shard "$W/n-other/b" 2 --k3diff-isolate off --k3diff-seed 6 --k3diff-replay "$W/b3.json" -k b3.json
shard "$W/new" 1 "${SH[@]}" --k3diff-backend crashing_candidates:WrongThenExit --k3diff-replay "$W/b3.json" -k b3.json
NR=(python "$ROOT/scripts/nightly_report.py")

echo
echo "| attack: a green not earned, a wrong party blamed | command | exit | outcome |"
echo "|---|---|---|---|"
row "stages = (): pytest" "ERROR|passed" "${P[@]}" --k3diff-backend crashing_candidates:NoStages
row "  ... k3diff hunt" "k3diff:|no failure" "${C[@]}" hunt --backend crashing_candidates:NoStages
row "a stage asked for that the candidate lacks (-k kda, moe only)" "nothing judged|passed" "${P[@]}" --k3diff-backend crashing_candidates:MoeOnly -k "fuzz and kda" --k3diff-isolate off
row "os._exit(0) in run(), isolation off: pytest" "k3diff:|ERROR|FAIL|passed" "${P[@]}" --k3diff-backend crashing_candidates:ExitsZeroInRun --k3diff-isolate off -k "fuzz and moe"
row "  ... k3diff replay --isolate off" "k3diff:|FAIL|PASS" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:ExitsZeroInRun --isolate off
row "  ... k3diff hunt --isolate off" "k3diff:|caught|no failure" "${C[@]}" hunt --backend crashing_candidates:ExitsZeroInRun --isolate off --examples 2
row "os._exit(0) at import, isolation off: pytest" "k3diff:|ERROR|passed" "${P[@]}" --k3diff-backend exit0_at_import:X --k3diff-isolate off
row "a verdict forged on the isolation socket: replay" "PASS|FAIL|k3diff:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:ForgesVerdict
row "provides() changes after the load-time check: pytest" "changed|passed" "${P[@]}" --k3diff-backend crashing_candidates:ProvidesNothingLater -k "fuzz and moe" --k3diff-seed 1
row "  ... k3diff replay" "changed|PASS|FAIL" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:ProvidesNothingLater
echo '{"k3diff_seed_format": 1, "case": {"stage": "mla", "version": 2, "batch": 4, "seed": 0, "steps": 3, "cache_lens": [0, 5, 64, 65]}}' > "$W/mla3.json"
row "later steps scaled by 1.01 (MLA, 3 steps): replay" "PASS|FAIL" "${C[@]}" replay "$W/mla3.json" --backend broken_candidate:ScaledFromStep1 --isolate off
row "OutOfMemoryError on a KB-sized case: pytest" "too large for|OutOfMemoryError|passed" "${P[@]}" --k3diff-backend crashing_candidates:AlwaysOutOfMemory -k "fuzz and moe" --k3diff-isolate off
row "  ... k3diff replay" "FAIL|k3diff:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:AlwaysOutOfMemory --isolate off
row "'no room' (out of memory receiving the case) forged on the isolation socket: replay" "FAIL|PASS|k3diff:" "${C[@]}" replay "$W/one.json" --backend crashing_candidates:ForgesNoRoom
row "an EP seed with 9 ranks: replay" "k3diff:|PASS|FAIL" "${C[@]}" replay "$W/ep9.json" --backend torch-blocked-ep --isolate off
row "  ... the option: --k3diff-ranks 9" "ERROR" "${P[@]}" --k3diff-backend torch-blocked-ep --k3diff-ranks 9
row "--k3diff-timeout 1e300" "ERROR|INTERNALERROR|Error" "${P[@]}" --k3diff-timeout 1e300 -k "fuzz and moe"
row "k3diff replay --timeout 1e10" "error|Error|PASS" "${C[@]}" replay "$W/one.json" --timeout 1e10
row "k3diff's own work past its limit (the reference on a slow machine)" "k3diff:|hang:|PASS|FAIL" env K3DIFF_JUDGE_TIMEOUT=0.001 "${C[@]}" replay "$W/one.json"
row "k3diff hunt --stage attention" "error|k3diff:" "${C[@]}" hunt --backend torch-blocked --stage attention
row "k3diff mutants --device foo" "k3diff:|Error" "${C[@]}" mutants --device foo --only gate_up_swapped
row "k3diff report, no input" "k3diff report:" "${C[@]}" report
row "nightly merge: a shard whose backend did not load (exit 8, 0 bytes)" "nightly" "${NR[@]}" "$W/n-load" --expected 1,2 --out "$W/o"
row "  ... a shard that judged nothing (exit 6)" "nightly" "${NR[@]}" "$W/n-nothing" --expected 1,2 --out "$W/o"
row "  ... a shard with an unreadable seed (exit 9)" "nightly" "${NR[@]}" "$W/n-seed" --expected 1,2 --out "$W/o"
row "  ... two artifacts of one shard name" "nightly" "${NR[@]}" "$W/n-dup" --expected 1,2 --out "$W/o"
row "  ... shards of two different seeds" "nightly" "${NR[@]}" "$W/n-other" --expected 1,2 --out "$W/o"
row "  ... (control: the two good shards)" "nightly" "${NR[@]}" "$W/ok" --expected 1,2 --out "$W/o"
row "report --compare of disjoint runs (NEW fails a case BASE never ran)" "matched" "${C[@]}" report --compare "$W/ok/results-1.jsonl" "$W/new/results-1.jsonl" -o "$W/cmp.html"
row "a link planted at a seed's name" "victim" planted seed
row "a link planted at the in-flight note's name" "victim" planted note
row "the CLI's in-flight note, while a case runs" "note" note_where "${C[@]}" replay "$W/one.json" --backend crashing_candidates:SpawnsAndHangs --timeout 60
row "k3diff show: terminal escapes and a 'replay' string in the seed" "ESC" show_check "$W/evil.json"
row "  ... escapes in the file's name" "ESC" show_check "$W/evil "$'\x1b'"[31mname.json"
