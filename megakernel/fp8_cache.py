"""The FP8 latent cache (docs/k3-decode.md §15, vLLM's `fp8_ds_mla` layout) served by the bf16 MLA
kernels.

One cache row per token, uint8: [kv_c as e4m3 (R) | one f32 scale per tile of TILE values |
k_pe as bf16]. A step on it (verify.mla):
  1. the step's projections and norms run on its tokens (mla.TOKEN_STAGES), each token's
     [kv_c | k_pe] written into a scratch row;
  2. those rows are quantised into the FP8 cache (`write`: per tile scale = max(f32(amax / 448),
     FLT_MIN), each value e4m3(f32(v / scale)), round to nearest even: the cast);
  3. the cache is read into a bf16 working copy (e4m3 * scale in f32, then bf16: the contract's
     read), the step's own rows as the FP8 cache holds them;
  4. the attention runs on the copy (mla.CACHE_STAGES).
Correct, not fast: the copy is 1152 bytes a row written and read again beside the 656 read, every
row of every step (the attention reading e4m3 itself is not written). Host-side torch ops, no host
read: a CUDA graph holds the step.
"""
import torch

E4M3_MAX = 448.0        # e4m3fn's largest finite value: amax / 448 maps a tile onto the format


def tile(R: int) -> int:
    """kv_c values per scale: FlashMLA's 128 where the latent has 128-tiles (R >= 256), else R / 2."""
    return 128 if R >= 256 and R % 128 == 0 else R // 2


def row_bytes(md) -> int:
    return md.R + 4 * (md.R // tile(md.R)) + 2 * md.RP


def read(rows: torch.Tensor, md) -> torch.Tensor:
    """rows [..., row_bytes] uint8 -> [..., R + RP] bf16, the attention's operands."""
    R, t = md.R, tile(md.R)
    lead = rows.shape[:-1]
    flat = rows.reshape(-1, rows.shape[-1])
    q = flat[:, :R].contiguous().view(torch.float8_e4m3fn).to(torch.float32).view(-1, R // t, t)
    scale = flat[:, R:R + 4 * (R // t)].contiguous().view(torch.float32)
    pe = flat[:, R + 4 * (R // t):].contiguous().view(torch.bfloat16)
    lat = (q * scale.unsqueeze(-1)).view(-1, R).to(torch.bfloat16)
    return torch.cat([lat, pe], dim=-1).view(*lead, R + md.RP)


def quantise(kv_c: torch.Tensor, k_pe: torch.Tensor, md) -> torch.Tensor:
    """[n, row_bytes] uint8 entries of n tokens' kv_c [n, R] and k_pe [n, RP] (bf16)."""
    n, R = kv_c.shape
    t = tile(R)
    v = kv_c.to(torch.float32).view(n, R // t, t)
    scale = torch.clamp(v.abs().amax(-1) / E4M3_MAX, min=torch.finfo(torch.float32).tiny)
    # |v / scale| <= 448 up to the quotient's rounding, which the cast rounds back to 448 (the
    # cast gives NaN only from 464 up)
    q = (v / scale.unsqueeze(-1)).to(torch.float8_e4m3fn).view(n, R)
    return torch.cat([q.view(torch.uint8), scale.contiguous().view(torch.uint8).view(n, -1),
                      k_pe.to(torch.bfloat16).contiguous().view(torch.uint8).view(n, -1)], dim=-1)


def write(cache: torch.Tensor, seq: torch.Tensor, pos: torch.Tensor, rows: torch.Tensor, md) -> torch.Tensor:
    """Rows [n, R + RP] bf16 (the step's [kv_c | k_pe]) quantised into the FP8 cache [B, Lcap,
    row_bytes] at (seq, pos); returns the whole cache read into bf16 (`read`), those rows as the
    cache now holds them."""
    if cache.shape[-1] != row_bytes(md):
        raise ValueError(f"megakernel MLA: an FP8 cache row of {cache.shape[-1]} bytes, the layout "
                         f"of these dims has {row_bytes(md)}")
    cache[seq, pos] = quantise(rows[:, :md.R], rows[:, md.R:], md)
    return read(cache, md)
