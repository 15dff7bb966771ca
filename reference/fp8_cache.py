"""The FP8 latent cache (docs/k3-decode.md §15): the byte layout, the quantiser and the reader.

One cache row (one token) is `row_bytes(cfg)` uint8, the layout of FlashMLA's / vLLM's
`fp8_ds_mla` cache scaled to the case's dims:

    [0, R)                      kv_c as float8_e4m3fn, tile by tile
    [R, R + 4 n)                n float32 scales, one per tile of `tile(cfg)` kv_c values
    [R + 4 n, R + 4 n + 2 rope) k_pe as bf16, not quantised

Quantiser (what a kernel writing a row must do, bit for bit): per tile s = max(f32(amax / 448),
FLT_MIN) with amax = max |kv_c| over the tile (448 = e4m3's largest finite value), then each value
v -> e4m3(v / s), round to nearest even, saturating at ±448. The quotient v / s is f32 in
faithful mode (as the kernels compute it) and exact in exact mode; its rounding to e4m3 is done
here on float64 (exact for every f32 or f64 input), not by a dtype cast whose path may round twice.

Reader: value = e4m3 · s, exact in exact mode; faithful mode rounds the product to bf16, as the
decode kernels dequantise into bf16 tensor-core operands [INFERRED]. k_pe is read as stored.
"""
from __future__ import annotations

import torch

E4M3_MAX = 448.0
FLT_MIN = 2.0 ** -126
_MIN_NORMAL_EXP = -6            # e4m3: normals from 2^-6, subnormal step 2^-9
_MANTISSA_BITS = 3


def tile(cfg) -> int:
    """kv_c values per scale: 128 (FlashMLA's: four tiles of K3's 512) where R >= 256 is a
    multiple of 128, else half of R (two tiles), so the per-tile scale shows at CPU dims too."""
    R = cfg.kv_lora_rank
    return 128 if R >= 256 and R % 128 == 0 else R // 2


def n_tiles(cfg) -> int:
    return cfg.kv_lora_rank // tile(cfg)


def row_bytes(cfg) -> int:
    return cfg.kv_lora_rank + 4 * n_tiles(cfg) + 2 * cfg.qk_rope_dim


def check(cfg) -> str | None:
    """Why `cfg` has no FP8 cache layout, or None."""
    R = cfg.kv_lora_rank
    if R < 2 or R % 2:
        return f"the FP8 latent cache needs an even kv_lora_rank >= 2, got {R}"
    if (R + 4 * n_tiles(cfg)) % 2:
        return "the FP8 cache's bf16 part would be misaligned"
    return None


def round_e4m3(y: torch.Tensor) -> torch.Tensor:
    """y (any float) rounded to the nearest e4m3fn value (ties to even), saturating at ±448;
    returned as float64 holding that value exactly."""
    y = y.to(torch.float64)
    mag = y.abs()
    e = torch.floor(torch.log2(torch.where(mag > 0, mag, 1.0))).clamp(min=_MIN_NORMAL_EXP)
    step = torch.exp2(e - _MANTISSA_BITS)
    q = torch.round(y / step) * step             # y / step is exact (a power of two); round: ties to even
    return q.clamp(-E4M3_MAX, E4M3_MAX)


def scales(kv_c: torch.Tensor, cfg) -> torch.Tensor:
    """[..., n] float32 scales of kv_c rows [..., R] (any float dtype, its values taken exactly)."""
    t = kv_c.to(torch.float64).unflatten(-1, (n_tiles(cfg), tile(cfg)))
    amax = t.abs().amax(-1)
    return (amax / E4M3_MAX).to(torch.float32).clamp(min=FLT_MIN)


def quantise(kv_c: torch.Tensor, k_pe: torch.Tensor, cfg, exact: bool, s=None) -> torch.Tensor:
    """Cache rows [..., row_bytes] uint8 of kv_c [..., R] and k_pe [..., rope] (k_pe must hold
    bf16 values: it is stored as is); `s` [..., n] float32: these scales instead of the contract's."""
    s = scales(kv_c, cfg) if s is None else s
    t = kv_c.unflatten(-1, (n_tiles(cfg), tile(cfg)))
    if exact:
        y = t.to(torch.float64) / s.to(torch.float64).unsqueeze(-1)
    else:
        y = t.to(torch.float32) / s.unsqueeze(-1)
    q = round_e4m3(y).to(torch.float8_e4m3fn).flatten(-2)
    lead = kv_c.shape[:-1]
    return torch.cat([q.view(torch.uint8), s.contiguous().view(torch.uint8).reshape(*lead, -1),
                      k_pe.to(torch.bfloat16).contiguous().view(torch.uint8).reshape(*lead, -1)], dim=-1)


def fields(rows: torch.Tensor, cfg) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(e4m3 values as float64 [..., R], scales float32 [..., n], k_pe bf16 [..., rope]) of rows."""
    R, n = cfg.kv_lora_rank, n_tiles(cfg)
    rows = rows.contiguous()
    q = rows[..., :R].contiguous().view(torch.float8_e4m3fn).to(torch.float64)
    s = rows[..., R:R + 4 * n].contiguous().view(torch.float32)
    pe = rows[..., R + 4 * n:].contiguous().view(torch.bfloat16)
    return q, s, pe


def dequantise(rows: torch.Tensor, cfg, exact: bool) -> torch.Tensor:
    """Rows [..., row_bytes] uint8 -> [..., R + rope] (float64 exact; float32 holding bf16
    values in faithful mode): the latent the attention reads."""
    q, s, pe = fields(rows, cfg)
    v = q.unflatten(-1, (n_tiles(cfg), tile(cfg))) * s.to(torch.float64).unsqueeze(-1)
    v = v.flatten(-2)
    if not exact:
        v = v.to(torch.float32).to(torch.bfloat16).to(torch.float32)   # f32 product, then bf16
        return torch.cat([v, pe.to(torch.float32)], dim=-1)
    return torch.cat([v, pe.to(torch.float64)], dim=-1)
