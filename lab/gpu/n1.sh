# next session, call 1 (.device, .mkcache): first the GPU halves of the CPU's draw tests (a version-3
# case's every tensor the CPU's bits; ~1 min), then the megakernel's ci profile, one run at a time
# on the card (no lanes side by side: they cost 10-30 too-large skips a run), default preset then
# full: its verify and FP8 cases judged now (megakernel/verify.py, fp8_cache.py), not refused
source lab/gpu/lib.sh
seq_lane draws python3 -m pytest -q -p no:randomly tests/reference/test_counter_draw.py tests/k3diff/test_inputs_draw.py tests/megakernel/test_mk_verify.py
seq_lane mk_def $P --k3diff-backend $MK --k3diff-profile ci --k3diff-seed ${SEED:-91501} --k3diff-report $R/mk_def.jsonl --k3diff-save $R/seeds_mk
seq_lane mk_full $P --k3diff-backend $MK --k3diff-profile ci --k3diff-preset full --k3diff-seed ${FSEED:-91502} --k3diff-report $R/mk_full.jsonl --k3diff-save $R/seeds_mk
finish
