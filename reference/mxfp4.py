"""MXFP4 (OCP MX, E2M1 elements + E8M0 group scales), as stored for K3's routed experts (docs/k3-decode.md §6).

Layout: ``packed[..., n, j]`` holds logical elements ``W[n, 2j]`` in the LOW nibble and
``W[n, 2j+1]`` in the HIGH nibble (packing along the input/K dim of ``W[out, in]``);
``scale[..., n, g]`` is the E8M0 code of the 32 elements ``[32g, 32g+32)`` of row n. Leading batch
dims (the expert index) are allowed everywhere.
"""
from __future__ import annotations

import torch

GROUP = 32
# E2M1 codes 0..7 (sign bit clear); codes 8..15 are their negatives (code 8 = -0).
E2M1_MAGNITUDES = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
E2M1_VALUES = E2M1_MAGNITUDES + tuple(-v for v in E2M1_MAGNITUDES)
E8M0_NAN = 255
E8M0_BIAS = 127


def e2m1_table(dtype=torch.float32, device="cpu") -> torch.Tensor:
    return torch.tensor(E2M1_VALUES, dtype=dtype, device=device)


def e8m0_to_float(codes: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """2^(code-127); code 255 is NaN (OCP). Powers of two are exact in f32 down to code 0 (2^-127,
    an f32 subnormal) and in f64."""
    c = codes.to(torch.int32)
    v = torch.exp2((c - E8M0_BIAS).to(torch.float64))
    v = torch.where(c == E8M0_NAN, torch.full_like(v, float("nan")), v)
    return v.to(dtype)


def unpack(packed: torch.Tensor) -> torch.Tensor:
    """[..., K/2] u8 -> [..., K] 4-bit codes (u8), even element from the low nibble."""
    lo = packed & 0x0F
    hi = packed >> 4
    return torch.stack((lo, hi), dim=-1).reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def pack(codes: torch.Tensor) -> torch.Tensor:
    """[..., K] 4-bit codes -> [..., K/2] u8 (inverse of `unpack`)."""
    if codes.shape[-1] % 2:
        raise ValueError(f"MXFP4 pack needs an even K, got {codes.shape[-1]}")
    c = codes.to(torch.uint8)
    return c[..., 0::2] | (c[..., 1::2] << 4)


def dequantize(packed: torch.Tensor, scale: torch.Tensor, dtype=torch.float32) -> torch.Tensor:
    """[..., N, K/2] u8 + [..., N, K/32] u8 -> [..., N, K] float; exact in f32/f64."""
    codes = unpack(packed)
    K = codes.shape[-1]
    if scale.shape[-1] * GROUP != K or scale.shape[:-1] != codes.shape[:-1]:
        raise ValueError(f"MXFP4 scale shape {tuple(scale.shape)} does not match packed {tuple(packed.shape)}")
    vals = e2m1_table(dtype, packed.device)[codes.long()]
    vals = vals.view(*codes.shape[:-1], K // GROUP, GROUP) * e8m0_to_float(scale, dtype).unsqueeze(-1)
    return vals.reshape(*codes.shape)


def scales_for(w: torch.Tensor) -> torch.Tensor:
    """E8M0 codes from each 32-group's amax, OCP style: 2^(floor(log2 amax) - 2), since E2M1's
    largest exponent is 2 (values up to 6 = 1.5 * 2^2). An all-zero group gets code 0."""
    g = w.to(torch.float64).reshape(*w.shape[:-1], w.shape[-1] // GROUP, GROUP)
    amax = g.abs().amax(-1)
    e = torch.floor(torch.log2(torch.where(amax > 0, amax, torch.ones_like(amax)))) - 2
    code = (e + E8M0_BIAS).clamp(0, 254)
    return torch.where(amax > 0, code, torch.zeros_like(code)).to(torch.uint8)


_MIDPOINTS = (0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0)


def quantize(w: torch.Tensor, scale: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Float [..., N, K] -> (packed [..., N, K/2] u8, scale [..., N, K/32] u8).

    Round to nearest E2M1 value of w / 2^(code-127), ties to the even mantissa (OCP RNE),
    saturating at ±6. `scale` defaults to `scales_for(w)`. Used to make test weights."""
    if w.shape[-1] % GROUP:
        raise ValueError(f"MXFP4 K dimension {w.shape[-1]} is not a multiple of {GROUP}")
    if scale is None:
        scale = scales_for(w)
    # dividing by a power of two is exact, so f32 suffices for f32/bf16 weights (f64 otherwise)
    ct = torch.float32 if w.dtype in (torch.float32, torch.bfloat16, torch.float16) else torch.float64
    x = w.to(ct) / e8m0_to_float(scale, ct).repeat_interleave(GROUP, dim=-1)
    a = x.abs()
    mids = torch.tensor(_MIDPOINTS, dtype=ct, device=w.device)
    code = torch.bucketize(a, mids)              # number of midpoints strictly below |x|
    # |x| exactly on a midpoint: bucketize picked the lower code; RNE wants the even one.
    on_mid = (code % 2 == 1) & (a == mids[code.clamp(max=len(_MIDPOINTS) - 1)])
    code = (code + on_mid.to(code.dtype)).clamp(max=7)
    code = torch.where(x < 0, code | 8, code)
    return pack(code.to(torch.uint8)), scale
