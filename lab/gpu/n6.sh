# next session, call 6 (.device, .mkcache): the attention steps at verify widths and on the FP8 cache
# beside the decode step (megakernel/tools/bench_verify.py, full dims), bench_mla's grid (no
# FlashInfer column: its wheels cannot travel with .device in one call), then the bugs planted in
# throwaway copies of the kernels and of verify.py (gpu_check.sh's mutants lane: 12 hunts)
source lab/gpu/lib.sh
seq_lane bench_verify python3 -m megakernel.tools.bench_verify --dims full
seq_lane bench_mla python3 -m megakernel.tools.bench_mla --dims full
seq_lane mutants bash scripts/gpu_check.sh "$R/gpu_check" mutants
finish
