"""Tools apart from the kernels (GPU unless said): `python -m megakernel bench` (bench.py, against
the torch baseline of torch_moe.py) and `python -m megakernel.tools.<name>`: benches (bench_kda,
bench_mla), tuners (tune_gemv, tune_mma, tune_attn, tune_fork, tune_streams, tune_persistent,
gemv_choice; each runs its candidates on its own config.Settings), timeline, launch_host, and on
the CPU persistent_regs (ptxas registers) and ptx_dump (the PTX of the compile list, and its
diff). None of it is imported by the kernels or the backend."""
