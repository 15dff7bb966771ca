"""Gated NoPE MLA decode (docs/k3-decode.md §3) and KDA decode (§4) for the `torch-blocked` backend.

MLA: absorbed decode, split-KV over chunks of KV_CHUNK cache rows with per-chunk online-softmax
partials merged by log-sum-exp. KDA: per-head batched delta rule on the slots that are live.
"""
from __future__ import annotations

import torch

from . import blocked_fp8
from .blocked_moe import _get
from .blocked_ops import F32, KV_CHUNK, bf16, exp, gemm, rms_scale, rmsnorm_bf16, sigmoid


# ================================================================ MLA
def prepare_mla(cfg, w: dict) -> dict:
    H, nope, v, R = cfg.mla_heads, cfg.qk_nope_dim, cfg.v_head_dim, cfg.kv_lora_rank
    kv_b = _get(w, "kv_b.weight").view(H, nope + v, R)
    return {
        # fused a-projection: rows [q_a | kv_a] -> outputs [q_c | kv_c | k_pe]
        "qkv_a": torch.cat([_get(w, "q_a.weight"), _get(w, "kv_a.weight")], dim=0),
        "q_norm": _get(w, "q_a_norm.weight"), "kv_norm": _get(w, "kv_a_norm.weight"),
        "q_b": _get(w, "q_b.weight"),
        "w_uk": kv_b[:, :nope, :],          # [H, nope, R]
        "w_uv_t": kv_b[:, nope:, :].transpose(1, 2),   # [H, R, v]
        "g": _get(w, "g.weight"), "o": _get(w, "o.weight"),
    }


def _attend(Q: torch.Tensor, rows: torch.Tensor, n: torch.Tensor, R: int, scale: float) -> torch.Tensor:
    """Sequences whose valid rows fill the same number of chunks, all heads. Q [G, H, R+rope] f32
    (= [ql | q_pe]), rows [G, >= max(n), R+rope] bf16 of which the first n[g] are sequence
    g's valid cache rows (L_g + 1; the rest may hold anything, NaN included: never read). Returns
    the un-rounded latent [G, H, R] f32. Grouping by chunk count keeps the padding small."""
    G, C = Q.shape[0], rows.shape[-1]
    n_chunks = -(-int(n.max()) // KV_CHUNK)
    pos = torch.arange(n_chunks * KV_CHUNK, device=rows.device)
    valid = pos.view(1, -1) < n.view(-1, 1)                          # [G, chunks*KV_CHUNK]
    kv = torch.zeros(G, n_chunks * KV_CHUNK, C, dtype=F32, device=rows.device)
    have = min(rows.shape[1], n_chunks * KV_CHUNK)                   # the cache may end inside the chunk
    # zero padding of the last chunk (the rows past n may hold NaN sentinels)
    kv[:, :have] = torch.where(valid[:, :have, None], rows[:, :have].to(F32), 0.0)
    kv = kv.view(G, n_chunks, KV_CHUNK, C)
    z = torch.einsum("ghc,gntc->gnht", Q, kv) * scale                # [G, chunks, H, KV_CHUNK] f32 scores
    z = z.masked_fill(~valid.view(G, n_chunks, 1, KV_CHUNK), float("-inf"))
    # per-chunk online-softmax partials; an empty chunk (m_c = -inf) gets p = 0 and weight 0 in
    # the merge instead of NaN (exp(-inf - -inf)): an empty split must not poison the merge
    m_c = z.amax(dim=-1)                                             # [G, chunks, H]
    p = exp(z - torch.where(m_c == float("-inf"), 0.0, m_c).unsqueeze(-1))
    l_c = p.sum(dim=-1)                                              # [G, chunks, H]
    acc_c = torch.einsum("gnht,gntr->gnhr", p, kv[..., :R])          # [G, chunks, H, R] unnormalised
    # log-sum-exp merge of the partials
    m = m_c.amax(dim=1)
    alpha = exp(m_c - m.unsqueeze(1))
    l = (l_c * alpha).sum(dim=1)
    acc = (acc_c * alpha.unsqueeze(-1)).sum(dim=1)
    return acc / l.unsqueeze(-1)


def token_positions(cache_lens: torch.Tensor, query_lens, T: int, device):
    """(sequence, cache row) of each token row: row L_b for a decode step; for a verify step
    (docs/k3-decode.md §14.1) the rows are sequence by sequence, token j of b at row L_b + j."""
    lens = cache_lens.to(device=device, dtype=torch.int64)
    if query_lens is None:
        return torch.arange(T, device=device), lens
    w = query_lens.to(device=device, dtype=torch.int64)
    seq = torch.repeat_interleave(torch.arange(w.numel(), device=device), w, output_size=T)
    start = torch.zeros_like(w)
    start[1:] = torch.cumsum(w, 0)[:-1]
    return seq, lens[seq] + torch.arange(T, device=device) - start[seq]


def run_mla(cfg, p: dict, x: torch.Tensor, kv_cache: torch.Tensor, cache_lens: torch.Tensor,
            query_lens=None, fp8_per_tensor: bool = False, see_next: bool = False) -> dict:
    """A decode or verify step; kv_cache bf16 or the FP8 rows (uint8, blocked_fp8). The last two
    flags plant bugs for k3diff.mutants (one scale per row; token j also seeing token j + 1)."""
    T = x.shape[0]
    H, nope, rope, v = cfg.mla_heads, cfg.qk_nope_dim, cfg.qk_rope_dim, cfg.v_head_dim
    ql_rank, R = cfg.q_lora_rank, cfg.kv_lora_rank
    eps = cfg.rms_eps
    a = bf16(gemm(x, p["qkv_a"]))
    q_c = rmsnorm_bf16(a[:, :ql_rank], p["q_norm"], eps)
    kv_c = rmsnorm_bf16(a[:, ql_rank:ql_rank + R], p["kv_norm"], eps)
    k_pe = a[:, ql_rank + R:]                               # not normalised, no rotary (NoPE)
    q = bf16(gemm(q_c, p["q_b"])).view(T, H, nope + rope)
    gz = bf16(gemm(x, p["g"]))                              # gate from the layer input x

    # absorbed query latent: ql[h] = bf16(q_nope[h] @ W_UK[h]) (batched over heads)
    ql = bf16(torch.bmm(q[:, :, :nope].transpose(0, 1).to(F32), p["w_uk"].to(F32))).transpose(0, 1)

    # insert this step's entries (row L_b + j for token j) before attending
    seq, pos = token_positions(cache_lens, query_lens, T, x.device)
    fp8 = kv_cache.dtype == torch.uint8
    if fp8:
        kv_cache[seq, pos] = blocked_fp8.write_rows(kv_c, k_pe, cfg, per_tensor=fp8_per_tensor)
    else:
        kv_cache[seq, pos] = torch.cat([kv_c, k_pe], dim=-1).to(kv_cache.dtype)

    scale = float(nope + rope) ** -0.5
    Q = torch.cat([ql, q[:, :, nope:]], dim=-1).to(F32)     # [T, H, R+rope]
    lat = torch.empty(T, H, R, dtype=torch.bfloat16, device=x.device)
    n = pos + 1                                             # rows 0..L_b + j only
    if see_next and query_lens is not None:                 # planted bug: one row too many
        last = torch.zeros_like(n, dtype=torch.bool)
        last[torch.cumsum(query_lens.to(x.device, torch.int64), 0) - 1] = True
        n = torch.where(last, n, n + 1)
    chunks = (n + KV_CHUNK - 1) // KV_CHUNK
    for c in sorted(set(chunks.tolist())):                  # one pass per chunk count
        toks = (chunks == c).nonzero().flatten()
        rows = kv_cache[seq[toks], :c * KV_CHUNK]
        if fp8:
            rows = blocked_fp8.read_rows(rows, cfg)
        lat[toks] = bf16(_attend(Q[toks], rows, n[toks], R, scale))

    o = bf16(torch.bmm(lat.transpose(0, 1).to(F32), p["w_uv_t"].to(F32))).transpose(0, 1)  # [T,H,v]
    gated = bf16(o.reshape(T, H * v).to(F32) * sigmoid(gz.to(F32)))
    out = bf16(gemm(gated, p["o"]))
    return {"out": out, "q_c": q_c, "kv_c": kv_c, "k_pe": k_pe, "ql": ql, "attn_latent": lat,
            "attn_out": o, "gated": gated}


# ================================================================ KDA
def run_kda_verify(cfg, p: dict, x, conv_state, rec_state, state_idx, query_lens, accepted,
                   conv_states, rec_states, accept_shift: int = 0, conv_shift_one: bool = False,
                   step=None) -> dict:
    """A verify step (docs/k3-decode.md §14.3): each sequence's tokens run the decode step in
    order on its slot; the state after every token goes to its row of conv_states / rec_states;
    the slot then holds the state after the last accepted token (unchanged if none). The last two
    arguments plant bugs for k3diff.mutants: commit the state `accept_shift` tokens later, and
    let the conv window move by one token over the whole step instead of W_b. `step`: the decode
    step to run token position by token position (a library adapter passes its own; default
    torch-blocked's `run_kda`)."""
    step_fn = step or run_kda
    T, dev = x.shape[0], x.device
    w = query_lens.to(torch.int64).tolist()
    idx = state_idx.to(torch.int64).tolist()
    acc = accepted.to(torch.int64).tolist()
    B = len(w)
    start = [sum(w[:b]) for b in range(B)]
    # the live slots as they came: what a sequence with nothing accepted goes back to
    saved = {i: (conv_state[i].clone(), rec_state[i].clone()) for i in idx if i > 0}
    res = {}
    for j in range(max(w, default=0)):
        on = [b for b in range(B) if w[b] > j]
        xj = torch.zeros((B,) + tuple(x.shape[1:]), dtype=x.dtype, device=dev)
        rows = torch.tensor([start[b] + j for b in on], device=dev)
        xj[on] = x[rows]
        sj = torch.tensor([idx[b] if w[b] > j else 0 for b in range(B)], device=dev)
        one = step_fn(cfg, p, xj, conv_state, rec_state, sj)
        for name, val in one.items():
            if name not in res:
                res[name] = torch.zeros((T,) + tuple(val.shape[1:]), dtype=val.dtype, device=dev)
            res[name][rows] = val[on]
        for b in on:
            if idx[b] > 0:
                conv_states[start[b] + j] = conv_state[idx[b]]
                rec_states[start[b] + j] = rec_state[idx[b]]
    for b in range(B):
        if idx[b] <= 0:
            continue
        a = min(acc[b] + accept_shift, w[b])
        if a == 0:
            conv_state[idx[b]], rec_state[idx[b]] = saved[idx[b]]
            continue
        conv_state[idx[b]] = conv_states[start[b] + a - 1]
        rec_state[idx[b]] = rec_states[start[b] + a - 1]
        if conv_shift_one:       # the window as if one token had come: the history shifted by one
            conv_state[idx[b], :, :-1] = saved[idx[b]][0][:, 1:]
    return res



def delta_rule(S: torch.Tensor, gk: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               beta: torch.Tensor):
    """One gated delta-rule step, state S[v][k] per head, all f32. Returns (S_new, readout)."""
    S = S * exp(gk).unsqueeze(2)                             # decay along the key axis
    e = (S @ k.unsqueeze(-1)).squeeze(-1)                    # [n, H, V]
    u = beta.unsqueeze(-1) * (v - e)
    S = S + u.unsqueeze(-1) * k.unsqueeze(2)
    o = (S @ q.unsqueeze(-1)).squeeze(-1)                    # readout with the updated state
    return S, o


def prepare_kda(cfg, w: dict) -> dict:
    P = cfg.kda_proj
    conv = _get(w, "conv.weight")
    return {
        # fused in-projection rows [q | k | v | g | f_a | beta] (vLLM's in_proj_qkvgfab order)
        "w_in": torch.cat([_get(w, n) for n in ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                "g_proj.weight", "f_a.weight", "b_proj.weight")], dim=0),
        "f_b": _get(w, "f_b.weight"), "o_proj": _get(w, "o_proj.weight"), "o_norm": _get(w, "o_norm.weight"),
        "conv": conv.reshape(3 * P, -1), "A_log": _get(w, "A_log").reshape(-1), "dt_bias": _get(w, "dt_bias"),
    }


def run_kda(cfg, p: dict, x: torch.Tensor, conv_state: torch.Tensor, rec_state: torch.Tensor,
            state_idx: torch.Tensor) -> dict:
    T, dev = x.shape[0], x.device
    H, D, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    res = {  # null rows (state_idx <= 0) keep these zeros, intermediates included
        "out": torch.zeros(T, cfg.hidden, dtype=torch.bfloat16, device=dev),
        "conv_out": torch.zeros(T, 3 * P, dtype=torch.bfloat16, device=dev),
        "decay": torch.zeros(T, H, D, dtype=F32, device=dev),
        "beta": torch.zeros(T, H, dtype=F32, device=dev),
        "core": torch.zeros(T, H, D, dtype=F32, device=dev),
        "normed": torch.zeros(T, P, dtype=torch.bfloat16, device=dev),
    }
    live = torch.nonzero(state_idx > 0).squeeze(1)
    if live.numel() == 0:
        return res
    slots = state_idx[live].to(torch.int64)
    xv = x[live]
    n = live.numel()

    z = bf16(gemm(xv, p["w_in"]))
    mixed, g2 = z[:, :3 * P], z[:, 3 * P:4 * P]
    f_a, b_raw = z[:, 4 * P:4 * P + D], z[:, 4 * P + D:4 * P + D + H]
    graw = bf16(gemm(f_a, p["f_b"]))

    # short causal conv: history (oldest first) then the new raw input; f32 taps in order
    hist = conv_state[slots]                                 # [n, 3P, W-1] bf16 (read live slots only)
    w = p["conv"].to(F32)
    Wd = w.shape[1]
    acc = torch.zeros(n, 3 * P, dtype=F32, device=dev)
    for j in range(Wd - 1):
        acc = acc + w[:, j] * hist[:, :, j].to(F32)
    acc = acc + w[:, Wd - 1] * mixed.to(F32)
    y = bf16(torch.nn.functional.silu(acc))
    # state shift-and-append of raw bf16 inputs (bit-exact)
    conv_state[slots] = torch.cat([hist[:, :, 1:], mixed.unsqueeze(-1).to(conv_state.dtype)], dim=-1)

    q, k, v = (y[:, i * P:(i + 1) * P].to(F32).view(n, H, D) for i in range(3))

    # gates (f32): bounded decay log-gate per channel, beta per head
    a_h = exp(p["A_log"][:H].to(F32)).view(1, H, 1)
    gk = cfg.gate_lower_bound * sigmoid(a_h * (graw.to(F32).view(n, H, D) + p["dt_bias"].to(F32).view(1, H, D)))
    beta = sigmoid(b_raw.to(F32))

    # L2 norms with eps inside the sum; q scaled by D^-1/2 after normalising
    q = q / torch.sqrt((q * q).sum(-1, keepdim=True) + 1e-6) * (D ** -0.5)
    k = k / torch.sqrt((k * k).sum(-1, keepdim=True) + 1e-6)

    S, o = delta_rule(rec_state[slots].to(F32), gk, q, k, v, beta)
    rec_state[slots] = S.to(rec_state.dtype)

    # gated RMSNorm per head (o kept f32 into the norm, as the fused decode kernel does)
    gate = sigmoid(g2.to(F32).view(n, H, D))
    normed = bf16(o * rms_scale(o, 1e-5) * p["o_norm"].to(F32) * gate).view(n, P)
    out = bf16(gemm(normed, p["o_proj"]))

    for name, val in (("out", out), ("conv_out", y), ("decay", gk), ("beta", beta), ("core", o),
                      ("normed", normed)):
        res[name][live] = val
    return res
