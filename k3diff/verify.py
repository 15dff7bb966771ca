"""Which state continues into a case's next step (docs/k3-decode.md §14.6).

A sequence advances by its accepted count (k3diff.verify_dims.accepted_at), so the next MLA step
writes from L_b + Σ accepted; the KDA slot already holds the state after the last accepted token
(the candidate commits it, and the state rule judges that it did). The cache and state tensors
themselves are carried by k3diff.runner, each implementation its own, through `carried`.
"""
from __future__ import annotations

import torch

from k3diff.materialize import inputs_for
from k3diff.verify_dims import advance


def next_step_inputs(case, device, step: int) -> dict:
    """The fresh inputs of decode or verify step `step` > 0 (no caches or states: each
    implementation carries its own), with the cache lengths the accepted tokens reached."""
    nxt = inputs_for(case, device, step)
    if "cache_lens" in nxt:
        moved = advance(case, step)
        nxt["cache_lens"] = torch.tensor([n + m for n, m in zip(case.cache_lens, moved)],
                                         dtype=torch.int64, device=device)
    return nxt


def carried(name: str, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A state carried to the next step in its contract dtype: an FP8 cache (bytes) as it is."""
    return t.to(dtype if t.is_floating_point() else t.dtype, copy=True)
