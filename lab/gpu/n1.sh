# next session, call 1 (.device): the megakernel's ci profile, one run at a time on the card (no
# lanes side by side: they cost 10-30 too-large skips a run), default preset then full preset
source lab/gpu/lib.sh
seq_lane() { local name=$1; shift; local left=$((END - ($(date +%s) - T0)))
  [ "$left" -gt 0 ] || { echo "$name not started: the deadline passed" >> "$R/lanes.txt"; return; }
  echo "+ [$name] $*" >> "$R/commands.txt"
  timeout -s INT -k 25 "$left" "$@" > "$R/$name.txt" 2>&1; echo "$name rc=$? at $(( $(date +%s) - T0 ))s" >> "$R/lanes.txt"; }
seq_lane mk_def $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed ${SEED:-91501} --k3diff-report $R/mk_def.jsonl --k3diff-save $R/seeds_mk
seq_lane mk_full $P --k3diff-backend $MK --k3diff-profile ci --k3diff-preset full --k3diff-seed ${FSEED:-91502} --k3diff-report $R/mk_full.jsonl --k3diff-save $R/seeds_mk
finish
