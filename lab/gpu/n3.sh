# next session, call 3 (.device): torch-blocked's ci default preset, beside the schedule hunt table and
# `mutants --device cuda` (both at small dims: little memory); PRESET=full TSEED=91512 for the full preset
# alone (HUNT=0)
source lab/gpu/lib.sh
PA=(); [ -n "${PRESET:-}" ] && PA=(--k3diff-preset "$PRESET")      # none: the GPU's default space
lane tb_${PRESET:-default} $P --k3diff-backend torch-blocked --k3diff-profile ci "${PA[@]}" --k3diff-seed ${TSEED:-91511} --k3diff-report $R/tb_${PRESET:-default}.jsonl --k3diff-save $R/seeds_tb
[ "${HUNT:-1}" = 1 ] && lane hunt bash -c "PART=2 EXAMPLES=12 T2=300 bash scripts/gpu_schedule_check.sh $R/sched; python3 -m k3diff.cli mutants --device cuda"
finish
