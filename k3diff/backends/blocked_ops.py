"""Device helpers of the `torch-blocked` backend: split-K GEMM, norms, SiTU, MXFP4 decode, top-k.

Written from docs/k3-decode.md (§§2, 5, 6, 7) on purpose without looking at `reference/`: this backend is
the second, independent implementation a differential test needs. Every helper keeps f32 and
leaves the bf16 roundings to the caller, so the §7 rounding points stay visible at the call site.
"""
from __future__ import annotations

import contextlib

import torch

F32 = torch.float32
BF16 = torch.bfloat16
SPLIT_K = 4          # K chunks of the big GEMVs; f32 partials summed in chunk order (like a
                     # split-K kernel's reduction), which changes the f32 rounding order only
KV_CHUNK = 64        # MLA split-KV: rows of the latent cache per online-softmax partial
MX_GROUP = 32        # OCP MX block size along K


def bf16(x: torch.Tensor) -> torch.Tensor:
    """A §7 rounding point: round-to-nearest-even to bfloat16."""
    return x.to(BF16)


@contextlib.contextmanager
def exact_f32_matmul():
    """f32 GEMMs must really be f32: TF32 would add error the baseline does not have."""
    old = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old)


def gemm(x: torch.Tensor, w: torch.Tensor, splits: int = SPLIT_K) -> torch.Tensor:
    """x[..., K] @ w[N, K]^T -> f32. bf16 operands are widened (exact products), each K chunk
    accumulates in f32 and the chunk partials are added in order (split-K)."""
    x = x.to(F32)
    K = x.shape[-1]
    step = max(1, -(-K // splits))
    acc = None
    for k0 in range(0, K, step):
        part = x[..., k0:k0 + step] @ w[:, k0:k0 + step].to(F32).t()
        acc = part if acc is None else acc + part
    if acc is None:                                   # K == 0: empty reduction
        acc = x.new_zeros(*x.shape[:-1], w.shape[0])
    return acc


# the special functions, each behind one name so the false-alarm controls (k3diff/false_alarms.py)
# can swap in versions at a GPU's documented ulp error; these are torch's own
def exp(x: torch.Tensor) -> torch.Tensor:
    return torch.exp(x)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x)


def rsqrt(x: torch.Tensor) -> torch.Tensor:
    return torch.rsqrt(x)


def rms_scale(x: torch.Tensor, eps: float) -> torch.Tensor:
    """(mean x^2 + eps)^(-1/2) over the last dim, f32, keepdim."""
    return rsqrt((x * x).mean(dim=-1, keepdim=True) + eps)


def rmsnorm_bf16(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """bf16(x * rsqrt(mean x^2 + eps) * w): f32 math, a single rounding at the end."""
    x = x.to(F32)
    return bf16(x * rms_scale(x, eps) * w.to(F32))


def situ(g: torch.Tensor, u: torch.Tensor, beta: float, beta_lin: float) -> torch.Tensor:
    """SiTU-GLU (§5.1), f32: (beta*tanh(g/beta)*sigmoid(g)) * (beta_lin*tanh(u/beta_lin))."""
    g = g.to(F32)
    u = u.to(F32)
    return (beta * torch.tanh(g / beta) * sigmoid(g)) * (beta_lin * torch.tanh(u / beta_lin))


# ---------------------------------------------------------------- MXFP4 (§6), by bit assembly
def e2m1_decode(nibble: torch.Tensor) -> torch.Tensor:
    """4-bit E2M1 codes (sign | 2-bit exponent | 1-bit mantissa) -> f32, by building the f32 bit
    pattern: exponent e>0 is a normal number 2^(e-1)*(1+m/2) (f32 exponent field 126+e,
    mantissa MSB m); e==0 is the subnormal m*0.5 (field 126 if m else +-0)."""
    n = nibble.to(torch.int32)
    sign = (n >> 3) & 1
    e = (n >> 1) & 3
    m = n & 1
    exp_field = torch.where(e > 0, 126 + e, 126 * m)
    man_field = torch.where(e > 0, m, torch.zeros_like(m))
    bits = (sign << 31) | (exp_field << 23) | (man_field << 22)
    return bits.view(F32)


def e8m0_decode(code: torch.Tensor) -> torch.Tensor:
    """E8M0 scale codes -> 2^(code-127) in f32, bit-exact: code<<23 is that power of two for
    codes 1..254; code 0 is the subnormal 2^-127 (bit 22); 255 is NaN (OCP)."""
    c = code.to(torch.int32)
    bits = torch.where(c == 0, torch.full_like(c, 1 << 22), c << 23)
    bits = torch.where(c == 255, torch.full_like(c, 0x7FC00000), bits)
    return bits.view(F32)


def mxfp4_dequant(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """packed [..., N, K/2] u8 (low nibble = even K element), scale [..., N, K/32] u8 -> f32
    [..., N, K]. Products with a power of two are exact in f32."""
    lo = packed & 0x0F
    hi = packed >> 4
    codes = torch.stack((lo, hi), dim=-1).flatten(-2)             # [..., N, K]
    vals = e2m1_decode(codes)
    s = e8m0_decode(scale).repeat_interleave(MX_GROUP, dim=-1)    # [..., N, K]
    return vals * s


# ---------------------------------------------------------------- router selection (§5.2)
def _rank_desc(x: torch.Tensor) -> torch.Tensor:
    """Indices ordering x descending along the last dim with ties kept in index order, i.e. the
    composite key (value desc, id asc). Callers canonicalise -0.0 and NaN first so equal keys
    are bitwise equal on every device."""
    return torch.sort(x, dim=-1, descending=True, stable=True).indices


def canonical_sel(sel: torch.Tensor) -> torch.Tensor:
    """NaN selects as 0 (§5.2.4); +0.0 turns -0.0 into +0.0 so the two tie."""
    return torch.nan_to_num(sel, nan=0.0, posinf=float("inf"), neginf=float("-inf")) + 0.0


def grouped_topk(sel: torch.Tensor, k: int, n_group: int, topk_group: int) -> torch.Tensor:
    """sel [T, E] f32 (canonical) -> ids [T, k] int64, best first, lower id wins ties.
    Group score = sum of the group's top-2 sel; only the topk_group best groups compete."""
    T, E = sel.shape
    if n_group > 1:
        per = E // n_group
        grouped = sel.view(T, n_group, per)
        top2 = torch.gather(grouped, -1, _rank_desc(grouped)[..., :2])
        gscore = top2[..., 0] + top2[..., 1]
        keep = torch.zeros(T, n_group, dtype=torch.bool, device=sel.device)
        keep.scatter_(1, _rank_desc(gscore + 0.0)[:, :topk_group], True)
        sel = sel.masked_fill(~keep.repeat_interleave(per, dim=1), float("-inf"))
    return _rank_desc(sel)[:, :k]
