"""Tools apart from the kernels (GPU): `python -m megakernel bench` (bench.py, against the torch
baseline of torch_moe.py) and `python -m megakernel.tools.<tune_mma | tune_streams |
tune_persistent | timeline>`. None of it is imported by the kernels or the backend."""
