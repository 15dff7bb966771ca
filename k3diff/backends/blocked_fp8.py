"""The FP8 latent cache (fp8_ds_mla layout, docs/k3-decode.md §15) for the `torch-blocked` backend.

Written from the contract, not from `reference/`: a row is [e4m3 kv_c | one f32 scale per tile |
bf16 k_pe]; a kernel writes scale = max(amax / 448, FLT_MIN) in f32 and e4m3(kv_c / scale) with
the hardware's rounding (a saturating cast, round to nearest even), and reads e4m3 * scale in f32,
rounded to bf16 for the attention's operands.
"""
from __future__ import annotations

import torch

from .blocked_ops import BF16, F32

FP8_MAX = 448.0


def tile_of(cfg) -> int:
    """kv_c values per scale: FlashMLA's 128 where the latent width has 128-tiles (>= 256), else
    half the latent width (the contract's choice for small dims)."""
    R = cfg.kv_lora_rank
    return 128 if R >= 256 and R % 128 == 0 else R // 2


def write_rows(kv_c: torch.Tensor, k_pe: torch.Tensor, cfg, per_tensor: bool = False) -> torch.Tensor:
    """[n, row bytes] uint8 entries of n tokens. per_tensor: one scale for the whole kv_c row
    (a planted bug, k3diff.mutants), written into every tile's slot."""
    n, R = kv_c.shape
    t = tile_of(cfg)
    v = kv_c.to(F32).view(n, R // t, t)
    amax = v.abs().amax(dim=(-1, -2), keepdim=True).squeeze(-1) if per_tensor else v.abs().amax(-1)
    scale = torch.clamp(amax / FP8_MAX, min=torch.finfo(F32).tiny).expand(n, R // t).contiguous()
    q = (v / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, R)
    return torch.cat([q.view(torch.uint8), scale.view(torch.uint8).view(n, -1),
                      k_pe.to(BF16).contiguous().view(torch.uint8).view(n, -1)], dim=-1)


def read_rows(rows: torch.Tensor, cfg) -> torch.Tensor:
    """rows [..., row bytes] uint8 -> [..., R + rope] bf16 (the attention's operands)."""
    R = cfg.kv_lora_rank
    t = tile_of(cfg)
    nt = R // t
    lead = rows.shape[:-1]
    flat = rows.reshape(-1, rows.shape[-1])
    q = flat[:, :R].contiguous().view(torch.float8_e4m3fn).to(F32).view(-1, nt, t)
    scale = flat[:, R:R + 4 * nt].contiguous().view(F32)
    pe = flat[:, R + 4 * nt:].contiguous().view(BF16)
    lat = (q * scale.unsqueeze(-1)).view(-1, R).to(BF16)
    return torch.cat([lat, pe], dim=-1).view(*lead, R + pe.shape[-1])
