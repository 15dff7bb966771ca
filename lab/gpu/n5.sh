# next session, call 5 (.device, .mkcache): the schedule dimension's cost, the same seed drawn and
# off, one after the other on an idle card; then the throughput of version-3 draws (counter draws on
# the GPU, weights included) against version 2's on the same cases and the same tree, at the full
# preset (BASE: another tree to time against instead, a folder holding it: `git archive REV k3diff
# reference | tar -x -C .base/REV`, carried)
source lab/gpu/lib.sh
seq_lane cost_on $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed 91505 --k3diff-report $R/cost_on.jsonl --k3diff-save $R/seeds_cost
seq_lane cost_off env K3DIFF_SCHEDULE=off $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed 91505 --k3diff-report $R/cost_off.jsonl --k3diff-save $R/seeds_cost
seq_lane thru python3 -m k3diff.tools.throughput --device cuda --preset full --keep-preset full --isolate on --compare-with "${BASE:-$PWD}" --baseline-version 2 --backend $MK --stages moe,mla,kda,layer --cases 8 --repeat 2 --seed 12
finish
