# next session, call 5 (.device): the schedule dimension's cost, the same seed drawn and off, one
# after the other on an idle card; then k3diff's own speed against c1b268b at the full preset
# (BASE: a git revision, or a folder holding that tree: `git archive c1b268b k3diff reference`)
source lab/gpu/lib.sh
seq_lane() { local name=$1; shift; local left=$((END - ($(date +%s) - T0)))
  [ "$left" -gt 0 ] || { echo "$name not started: the deadline passed" >> "$R/lanes.txt"; return; }
  echo "+ [$name] $*" >> "$R/commands.txt"
  timeout -s INT -k 25 "$left" "$@" > "$R/$name.txt" 2>&1; echo "$name rc=$? at $(( $(date +%s) - T0 ))s" >> "$R/lanes.txt"; }
seq_lane cost_on $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed 91505 --k3diff-report $R/cost_on.jsonl --k3diff-save $R/seeds_cost
seq_lane cost_off env K3DIFF_SCHEDULE=off $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed 91505 --k3diff-report $R/cost_off.jsonl --k3diff-save $R/seeds_cost
seq_lane thru python3 -m k3diff.tools.throughput --device cuda --preset full --keep-preset full --isolate on --compare-with ${BASE:-c1b268b} --backend $MK --stages moe,mla,kda,layer --cases 8 --repeat 2 --seed 12
finish
