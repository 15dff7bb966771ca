"""Block Attention Residuals, the AttnRes operator (docs/k3-decode.md §2.2).

Steps per row: (1) prefix <- bf16(prefix + delta) if delta is given (the kernel does this in
place; here the new prefix is returned); (2) blocks[:, write_idx] <- prefix if write_idx >= 0 (bit
copy, returned as a new blocks tensor); (3) a depth softmax over the n+1 sources blocks[:, :n] and
prefix -- with n == 0 the mix is exactly prefix (no softmax); the logits use RMS-normalised keys
WITHOUT w_norm (w_norm only enters through u = w_norm * w_proj, not rounded) and the mix is over the
UN-normalised values; (4) optional output RMSNorm with a single rounding, else bf16(m).
Only blocks[:, :n] (and the written slot) are read, so unused slots may hold anything (NaN).
"""
from __future__ import annotations

import torch

from .numerics import Numerics


def attn_res(prefix: torch.Tensor, delta: torch.Tensor | None, blocks: torch.Tensor,
             w_norm: torch.Tensor, w_proj: torch.Tensor, w_out: torch.Tensor | None, n: int,
             write_idx: int, num: Numerics, eps: float = 1e-5, eps_out: float = 1e-5):
    """prefix [T, d], blocks [T, NB, d] in the working dtype (never modified).
    Returns (out, new_prefix, new_blocks)."""
    if delta is not None:
        prefix = num.round(prefix + delta)
    if write_idx >= 0:
        blocks = blocks.clone()
        blocks[:, write_idx] = prefix
    if n == 0:
        m = prefix
    else:
        u = w_norm.to(num.dtype) * w_proj.reshape(-1).to(num.dtype)
        src = torch.cat([blocks[:, :n], prefix.unsqueeze(1)], dim=1)           # [T, n+1, d]
        logit = (src * u).sum(-1) * torch.rsqrt(src.pow(2).mean(-1) + eps)    # [T, n+1]
        p = torch.softmax(logit, dim=-1)
        m = (p.unsqueeze(-1) * src).sum(1)
    out = num.rmsnorm(m, w_out, eps_out) if w_out is not None else num.round(m)
    return out, prefix, blocks
