# next session, call 3 (.device): torch-blocked's full preset, then the schedule hunt table and mutants
source lab/gpu/lib.sh
lane tb_full $P --k3diff-backend torch-blocked --k3diff-profile ci --k3diff-preset full --k3diff-seed ${TSEED:-91512} --k3diff-report $R/tb_full.jsonl --k3diff-save $R/seeds_tb
lane hunt bash -c "PART=2 EXAMPLES=12 T2=300 bash scripts/gpu_schedule_check.sh $R/sched; python3 -m k3diff.cli mutants --device cuda"
finish
