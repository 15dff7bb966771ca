"""Gated MLA decode, NoPE, in vLLM's absorbed form (docs/k3-decode.md §3).

Per token: a = bf16(x [W_qa; W_kva]^T) -> q_c | kv_c | k_pe; RMSNorm q_c and kv_c (k_pe is not
normalised); q = bf16(q_c W_qb^T) per head [nope | rope]; the query is absorbed into the latent
space, ql[h] = bf16(q_nope[h] W_UK[h]); no rotary anywhere (positions are ignored).

The new entry (kv_c | k_pe) is inserted into the ragged cache at row L_b BEFORE attention, so
sequence b attends over rows 0..L_b, and over exactly those rows (sequences of one length are
batched together, nothing is padded): rows beyond L_b are never read (the materialiser fills them
with NaN to prove it), and ragged lengths need no masking tricks. Scores, softmax and the P·C sum
are f32 (f64 exact); lat and o are rounded. The output gate comes from the layer input x, not
from the attention output.

With `num.magnitudes` ("abs." outputs, numerics.py): the GEMVs and the per-head absorptions their
|a||b| contraction; the norms |output|; the attention latent lat = Σ_t p_t C_t the bound of its two
accumulations, Σ_t p_t|C_t| (the P·C sum, p >= 0) plus Σ_t p_t A_t (|C_t| + |lat|), where
A_t = scale·|q|·|C_t| bounds the score z_t's own accumulation and δlat = Σ_t p_t δz_t (C_t − lat)
carries a score error into the latent (|C_t − lat| bounded by |C_t| + |lat| to stay two matmuls);
the new cache row (kv_c | k_pe) as "abs.kv_cache.new" [T, R+rope]. The gate (an element-wise
product) has none.

Verify steps (docs/k3-decode.md §14.2, `query_lens` [B] given): sequence b brings W_b tokens (T = Σ W_b rows of x,
sequence by sequence); all W_b entries are written at rows L_b .. L_b + W_b - 1 of its cache
[B, Lcap, ...] first, and its token j attends rows 0 .. L_b + j (its own earlier tokens, never a
later one). A decode step is the verify step with every W_b = 1, computed by the same code.
FP8 cache (§15, a uint8 cache in `fp8_cache`'s layout): the new entries are quantised with the
reference's own rounding on write, and every row attended is dequantised on read.
"""
from __future__ import annotations

import torch

from . import fp8_cache
from .numerics import Numerics


def token_rows(cache_lens: torch.Tensor, query_lens: torch.Tensor | None, device) -> tuple:
    """(sequence of each token, cache row it writes = the last row it attends): a decode step's
    token b is sequence b at row L_b; a verify step's token j of sequence b is at row L_b + j."""
    lens = cache_lens.to(device=device, dtype=torch.int64)
    if query_lens is None:
        return torch.arange(lens.numel(), device=device), lens
    w = query_lens.to(device=device, dtype=torch.int64)
    seq = torch.repeat_interleave(torch.arange(w.numel(), device=device), w)
    first = torch.cumsum(w, 0) - w
    j = torch.arange(seq.numel(), device=device) - first[seq]
    return seq, lens[seq] + j


def mla(x: torch.Tensor, kv_cache: torch.Tensor, cache_lens: torch.Tensor, weights: dict, cfg,
        num: Numerics, query_lens: torch.Tensor | None = None) -> dict:
    """x [T, d] working dtype; kv_cache [B, Lcap, R+rope] (or uint8 [B, Lcap, fp8 row bytes]; the
    caller's tensor, not modified); cache_lens [B]; query_lens [B] for a verify step (else B = T).
    Returns the intermediates, `out` and the updated cache as a new tensor."""
    T = x.shape[0]
    H, R, nope, rope, vd = cfg.mla_heads, cfg.kv_lora_rank, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
    scale = cfg.qk_head_dim ** -0.5

    q_c = num.rmsnorm(num.round(num.linear(x, weights["q_a.weight"])), weights["q_a_norm.weight"], cfg.rms_eps)
    kv_a = num.round(num.linear(x, weights["kv_a.weight"]))
    kv_c = num.rmsnorm(kv_a[:, :R], weights["kv_a_norm.weight"], cfg.rms_eps)
    k_pe = kv_a[:, R:]
    q = num.round(num.linear(q_c, weights["q_b.weight"])).view(T, H, nope + rope)
    q_nope, q_pe = q[..., :nope], q[..., nope:]

    kv_b = weights["kv_b.weight"].to(torch.float64).view(H, nope + vd, R)
    w_uk, w_uv = kv_b[:, :nope, :], kv_b[:, nope:, :]                     # [H, nope, R], [H, v, R]
    ql = num.round(torch.einsum("thp,hpr->thr", q_nope.double(), w_uk).to(num.dtype))
    query = torch.cat([ql, q_pe], dim=-1)                                  # [T, H, R+rope]

    # the updated cache: exact mode holds it in float64 (the new rows unrounded); faithful mode in
    # the caller's bf16, whose every other bit (NaN payloads included) it keeps, since the new rows
    # are bf16 values already (kv_c and k_pe are rounded). An FP8 cache stays bytes: the new rows
    # are quantised (the reference's rounding, fp8_cache) and every row read is dequantised.
    fp8 = kv_cache.dtype == torch.uint8
    seq, pos = token_rows(cache_lens, query_lens, x.device)
    if fp8:
        cache = kv_cache.clone()
        cache[seq, pos] = fp8_cache.quantise(kv_c, k_pe, cfg, num.exact)
    else:
        cache = kv_cache.to(num.dtype if num.exact else kv_cache.dtype, copy=True)
        cache[seq, pos] = torch.cat([kv_c, k_pe], dim=-1).to(cache.dtype)
    lat = torch.empty(T, H, R, dtype=num.dtype, device=x.device)
    mag_lat = torch.empty(T, H, R, dtype=torch.float64, device=x.device) if num.magnitudes else None
    # tokens that attend the same number of rows attend together: each softmax still runs over
    # exactly its L+1 rows (the same reductions as one token at a time, so the same bits), one
    # step per length. The GEMM operands are widened to float64 once and the products cast back
    # as num.mm does (the same exact values, without num.mm's per-call widening of float64 operands)
    query = query.to(torch.float64)
    order = torch.argsort(pos, stable=True)             # the tokens, grouped by length
    lengths, counts = torch.unique_consecutive(pos[order], return_counts=True)
    start = 0
    for L, n in zip(lengths.tolist(), counts.tolist()):
        toks = order[start:start + n]
        start += n
        rows = cache[seq[toks], :L + 1]
        rows = (fp8_cache.dequantise(rows, cfg, num.exact) if fp8 else rows).to(torch.float64)   # [G, L+1, R+rope]
        z = scale * (query[toks] @ rows.transpose(1, 2)).to(num.dtype)     # [G, H, L+1]
        p = torch.softmax(z, dim=-1)
        lat[toks] = (p.to(torch.float64) @ rows[..., :R]).to(num.dtype)
        if mag_lat is not None:
            c_abs = rows[..., :R].abs()
            pa = p * (scale * (query[toks].abs() @ rows.abs().transpose(1, 2)))     # p_t A_t
            mag_lat[toks] = p @ c_abs + pa @ c_abs + pa.sum(-1, keepdim=True) * lat[toks].abs()
    lat = num.round(lat)
    o = num.round(torch.einsum("thr,hvr->thv", lat.double(), w_uv).to(num.dtype))   # [T, H, v]

    gz = num.round(num.linear(x, weights["g.weight"]))
    gated = num.round(o.reshape(T, H * vd) * torch.sigmoid(gz))           # one rounding [INFERRED]
    out = num.round(num.linear(gated, weights["o.weight"]))
    res = {"out": out, "q_c": q_c, "kv_c": kv_c, "k_pe": k_pe, "ql": ql, "attn_latent": lat,
           "attn_out": o, "gated": gated, "kv_cache": cache}
    if num.magnitudes:
        mag_kpe = num.abs_linear(x, weights["kv_a.weight"][R:])
        res.update({"abs.out": num.abs_linear(gated, weights["o.weight"]), "abs.q_c": q_c.abs(),
                    "abs.kv_c": kv_c.abs(), "abs.k_pe": mag_kpe,
                    "abs.ql": torch.einsum("thp,hpr->thr", q_nope.double().abs(), w_uk.abs()),
                    "abs.attn_latent": mag_lat,
                    "abs.attn_out": torch.einsum("thr,hvr->thv", lat.double().abs(), w_uv.abs()),
                    "abs.kv_cache.new": torch.cat([kv_c.abs(), mag_kpe], dim=-1)})
    return res


def mla_query(x: torch.Tensor, weights: dict, cfg) -> torch.Tensor:
    """The absorbed query [T, H, R + rope] (float64, exact mode: ql | q_pe) each token scores the
    cache with, times the softmax scale: z = mla_query(x) · C_t. For drawing caches whose scores
    take chosen values (k3diff's score modes)."""
    from .numerics import get

    num = get("exact")
    T = x.shape[0]
    H, R, nope, rope = cfg.mla_heads, cfg.kv_lora_rank, cfg.qk_nope_dim, cfg.qk_rope_dim
    x = num.load(x)
    q_c = num.rmsnorm(num.linear(x, weights["q_a.weight"]), weights["q_a_norm.weight"], cfg.rms_eps)
    q = num.linear(q_c, weights["q_b.weight"]).view(T, H, nope + rope)
    w_uk = weights["kv_b.weight"].to(torch.float64).view(H, -1, R)[:, :nope, :]
    ql = torch.einsum("thp,hpr->thr", q[..., :nope], w_uk)
    return torch.cat([ql, q[..., nope:]], dim=-1) * cfg.qk_head_dim ** -0.5
