"""The share of a GPU this process may use: all of it, unless xdist puts several workers on one GPU.

Then each worker, and the isolated child that runs its cases (k3diff.isolation sends it the share),
gets 1/n of the GPU less what lives outside PyTorch's allocator: the allocator enforces it, and the
weight cache (k3diff.materialize) and the fit check (k3diff.sizing) count only that share. Without
it every worker's weight cache aimed at 60% of the whole GPU and two full-dims workers ran each
other out of memory (the H200 run of 9aaaed6). Whether n workers can judge full-dims cases at all
is k3diff.sizing.workers_too_many.
"""
from __future__ import annotations

import torch

_GPU_SHARE: dict[int, float] = {}
# per worker, outside the allocator: two CUDA contexts (the worker's and its child's, 518 MiB each in
# the H200's OOM text of 945021e), compiled kernels' modules and library workspaces
OUTSIDE_ALLOCATOR = 3 << 30


def share_gpu(index: int, workers_on_it: int) -> float:
    """Give this process and its child 1/`workers_on_it` of GPU `index`: the allocator enforces it,
    the weight cache and the fit check count only that share. Returns the allocator's fraction."""
    if workers_on_it <= 1:
        return 1.0
    total = torch.cuda.get_device_properties(index).total_memory
    fraction = max(0.05, 1.0 / workers_on_it - OUTSIDE_ALLOCATOR / total)
    cap_gpu(index, fraction)
    return fraction


def cap_gpu(index: int, fraction: float) -> None:
    """This process may hold `fraction` of GPU `index` (the isolated child takes its parent's)."""
    if fraction < 1.0:
        torch.cuda.set_per_process_memory_fraction(fraction, index)
        _GPU_SHARE[index] = fraction


def gpu_share(device) -> float:
    dev = torch.device(device)
    if dev.type != "cuda":
        return 1.0
    return _GPU_SHARE.get(dev.index if dev.index is not None else torch.cuda.current_device(), 1.0)
