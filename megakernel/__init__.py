"""Fused LatentMoE decode kernels for Kimi K3 in CuTe DSL.

Importing this package never imports cutlass or torch.cuda: the backend must load (and say why it
cannot run) on machines without a GPU or without CuTe DSL. Kernel modules import cutlass at their
top; only `megakernel.cute_env` decides the target arch, before the first cutlass import.
"""
