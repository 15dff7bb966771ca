"""KDA (Kimi Delta Attention) decode step (docs/k3-decode.md §4).

Per valid row: projections z = bf16(x W^T) for q, k, v (raw conv inputs), g2 (output gate), f_a,
beta_raw; graw = bf16(f_a W_fb^T); depthwise causal short conv with SiLU over
(conv history, new raw input); bounded decay gate gk = lb*sigmoid(exp(A_log[h]) (graw + dt_bias));
beta = sigmoid(beta_raw); L2-normalised q (times D^-1/2) and k; the delta rule on the recurrent
state S[h][v][k] (decay along the KEY axis), readout with the UPDATED state; gated RMSNorm per head
(single rounding, sigmoid gate); o_proj.

State: conv_state [S, 3P, W-1] holds the raw bf16 inputs (oldest first); the new state is a pure
shift-and-append, so in faithful mode it is bit-exact. recurrent_state [S, H, D, D] is f32.
Rows with state_idx <= 0 (slot 0 = null/padding slot) are not computed at all: every output and
intermediate of that row is exactly 0 and no state is read or written. The core readout `o` stays
f32 into the gated norm, as in the fused decode kernel (§4.5): the contract stores it as f32, and a
baseline that rounded it (vLLM's unfused path, §7) would sometimes land closer to the exact value
by luck than a kernel that keeps f32 — calibrating the error rule against luck.
A_log is per head: the first H entries of the stored vector (§1.3 [CONFLICT] resolved as vLLM).

With `num.magnitudes` ("abs." outputs, numerics.py), the delta rule's bound carried through its
own formulas on absolute values: S' = S·exp(g) (|S'|), e = S'k̂ (|S'||k̂|), u = β(v − e)
(|β|(|v| + |S'||k̂|)), S_new = S' + u k̂ᵀ (|S'| + |u|_abs |k̂|ᵀ) as "abs.recurrent_state" [S, H, D, D]
at the live slots, and the readout core = S_new q̂ (|S_new|_abs |q̂|); the GEMVs their |x||W|^T (the
new conv column q|k|v as "abs.conv_state.new" [S, 3P], by slot); the gated norm |normed|. The
short conv (four taps), the gates and beta have none.
"""
from __future__ import annotations

import torch

from .numerics import Numerics

L2_EPS = 1e-6   # inside the sum of squares, as in vLLM's fused_recurrent kernel


def check_state_idx(state_idx: torch.Tensor, n_slots: int) -> None:
    idx = state_idx.long().tolist()
    live = [i for i in idx if i > 0]
    if any(i >= n_slots for i in live):
        raise ValueError(f"state_idx {max(live)} is out of range for {n_slots} state slots")
    if len(set(live)) != len(live):
        raise ValueError("state_idx holds a slot twice; each live row needs its own state slot")


def kda(x: torch.Tensor, conv_state: torch.Tensor, recurrent_state: torch.Tensor,
        state_idx: torch.Tensor, weights: dict, cfg, num: Numerics, state_magnitude=None) -> dict:
    """`state_magnitude` (magnitudes only): the bound Σ|a||b| the incoming state already carries
    (a verify step's earlier tokens, kda_verify); default |recurrent_state|."""
    T = x.shape[0]
    H, D, P = cfg.kda_heads, cfg.kda_head_dim, cfg.kda_proj
    check_state_idx(state_idx, conv_state.shape[0])
    conv_new = num.load(conv_state)
    rec_new = num.load(recurrent_state)
    rows = (state_idx.to(x.device) > 0).nonzero(as_tuple=True)[0]     # live rows only
    slots = state_idx.to(x.device).long()[rows]
    xv = x[rows]
    n = xv.shape[0]

    lin = lambda t, name: num.round(num.linear(t, weights[name]))
    mixed = torch.cat([lin(xv, "q_proj.weight"), lin(xv, "k_proj.weight"), lin(xv, "v_proj.weight")], -1)
    g2 = lin(xv, "g_proj.weight")
    graw = lin(lin(xv, "f_a.weight"), "f_b.weight")
    braw = lin(xv, "b_proj.weight")

    # short conv: history (oldest first) then the current token; weight column W-1 = current token
    w_conv = weights["conv.weight"].reshape(3 * P, -1).to(num.dtype)
    window = torch.cat([conv_new[slots], mixed.unsqueeze(-1)], dim=-1)    # [n, 3P, W]
    conv_out = num.round(torch.nn.functional.silu((window * w_conv).sum(-1)))
    conv_new[slots] = window[..., 1:]                                     # shift-and-append

    a = torch.exp(weights["A_log"].reshape(-1)[:H].to(num.dtype))          # per head
    dt_bias = weights["dt_bias"].to(num.dtype).view(H, D)
    decay = cfg.gate_lower_bound * torch.sigmoid(a.view(H, 1) * (graw.view(n, H, D) + dt_bias))
    beta = torch.sigmoid(braw)                                             # [n, H]

    q, k, v = conv_out.view(n, 3, H, D).unbind(1)
    qh = q * torch.rsqrt((q * q).sum(-1, keepdim=True) + L2_EPS) * D ** -0.5
    kh = k * torch.rsqrt((k * k).sum(-1, keepdim=True) + L2_EPS)
    S = rec_new[slots] * torch.exp(decay).unsqueeze(-2)                   # [n, H, V, K]
    e = (S * kh.unsqueeze(-2)).sum(-1)                                    # [n, H, V]
    u = beta.unsqueeze(-1) * (v - e)
    S = S + u.unsqueeze(-1) * kh.unsqueeze(-2)
    core = (S * qh.unsqueeze(-2)).sum(-1)                                  # o kept f32 (fused path)
    rec_new[slots] = S
    if num.magnitudes:
        held = recurrent_state if state_magnitude is None else state_magnitude
        S_dec = held.to(x.device)[slots].to(torch.float64).abs() * torch.exp(decay).unsqueeze(-2)
        mag_u = beta.abs().unsqueeze(-1) * (v.abs() + (S_dec * kh.abs().unsqueeze(-2)).sum(-1))
        mag_S = S_dec + mag_u.unsqueeze(-1) * kh.abs().unsqueeze(-2)
        mag_core = (mag_S * qh.abs().unsqueeze(-2)).sum(-1)

    inv = torch.rsqrt(core.pow(2).mean(-1, keepdim=True) + cfg.rms_eps)
    normed = num.round(core * inv * weights["o_norm.weight"].to(num.dtype) * torch.sigmoid(g2.view(n, H, D)))
    normed = normed.reshape(n, P)
    out = num.round(num.linear(normed, weights["o_proj.weight"]))

    def full(t):  # scatter live rows into an all-zero [T, ...] tensor
        z = torch.zeros((T,) + t.shape[1:], dtype=t.dtype, device=x.device)
        z[rows] = t
        return z

    res = {"out": full(out), "conv_out": full(conv_out), "decay": full(decay), "beta": full(beta),
           "core": full(core), "normed": full(normed), "conv_state": conv_new,
           "recurrent_state": rec_new}
    if num.magnitudes:
        mag_rec = torch.zeros_like(rec_new)
        mag_rec[slots] = mag_S
        mag_conv = torch.zeros(conv_new.shape[:2], dtype=torch.float64, device=x.device)
        mag_conv[slots] = torch.cat([num.abs_linear(xv, weights[f"{c}_proj.weight"]) for c in "qkv"], -1)
        res.update({"abs.out": full(num.abs_linear(normed, weights["o_proj.weight"])),
                    "abs.core": full(mag_core), "abs.normed": full(normed.abs()),
                    "abs.recurrent_state": mag_rec, "abs.conv_state.new": mag_conv})
    return res


def kda_verify(x: torch.Tensor, conv_state: torch.Tensor, recurrent_state: torch.Tensor,
               state_idx: torch.Tensor, query_lens: torch.Tensor, accepted: torch.Tensor,
               conv_states: torch.Tensor, recurrent_states: torch.Tensor, weights: dict, cfg,
               num: Numerics) -> dict:
    """A verify step (docs/k3-decode.md §14.3): sequence b's W_b tokens (rows of x, sequence by
    sequence) run the decode step one after another on slot state_idx[b], exactly W_b single-token
    steps: token j's conv window and delta rule continue from token j-1's state. The state after
    every token is kept in the per-token buffers conv_states [T, 3P, W-1] and recurrent_states
    [T, H, D, D] (rows of null sequences untouched); the slot ends holding the state after token
    accepted[b] - 1 (accepted 0: the state before the step), the one the next step continues from.
    Returns `kda`'s outputs per token plus the four updated state tensors."""
    T = x.shape[0]
    w = query_lens.to(torch.int64).cpu()
    acc = accepted.to(torch.int64).cpu()
    idx = state_idx.to(torch.int64).cpu()
    B = w.numel()
    first = torch.cumsum(w, 0) - w
    conv, rec = num.load(conv_state), num.load(recurrent_state)
    conv_tok, rec_tok = num.load(conv_states), num.load(recurrent_states)
    # the accumulation bound grows token by token: token j's state carries tokens 0..j-1's
    mag_pool = recurrent_state.to(torch.float64).abs() if num.magnitudes else None
    res: dict = {}
    for j in range(int(w.max()) if B else 0):
        active = (w > j).nonzero(as_tuple=True)[0]                    # sequences with a token j
        toks = first[active] + j
        xj = torch.zeros((B,) + x.shape[1:], dtype=x.dtype, device=x.device)
        xj[active.to(x.device)] = x[toks.to(x.device)]
        idx_j = torch.where(w > j, idx, torch.zeros_like(idx))
        step = kda(xj, conv, rec, idx_j.to(state_idx.device), weights, cfg, num, mag_pool)
        conv, rec = step.pop("conv_state"), step.pop("recurrent_state")
        live = active[idx[active] > 0]
        t_live, s_live = (first[live] + j).to(x.device), idx[live].to(x.device)
        conv_tok[t_live] = conv[s_live].to(conv_tok.dtype)
        rec_tok[t_live] = rec[s_live].to(rec_tok.dtype)
        if num.magnitudes:
            mag_rec, mag_conv = step.pop("abs.recurrent_state"), step.pop("abs.conv_state.new")
            mag_pool[s_live] = mag_rec[s_live]
            for name, src in (("abs.recurrent_states", mag_rec), ("abs.conv_states.new", mag_conv)):
                if name not in res:
                    res[name] = torch.zeros((T,) + src.shape[1:], dtype=src.dtype, device=x.device)
                res[name][t_live] = src[s_live]
        for name, t in step.items():
            if name not in res:
                res[name] = torch.zeros((T,) + t.shape[1:], dtype=t.dtype, device=x.device)
            res[name][toks.to(x.device)] = t[active.to(x.device)]
    # the slot continues from the state after the last accepted token
    conv_new, rec_new = num.load(conv_state), num.load(recurrent_state)
    keep = [b for b in range(B) if idx[b] > 0 and acc[b] > 0]
    mag_conv_slot = torch.zeros(conv_new.shape[:2], dtype=torch.float64, device=x.device)
    mag_rec_slot = torch.zeros_like(rec_new, dtype=torch.float64)
    for b in keep:
        t = int(first[b] + acc[b] - 1)
        conv_new[idx[b]] = conv_tok[t]
        rec_new[idx[b]] = rec_tok[t]
        if num.magnitudes:
            mag_conv_slot[idx[b]] = res["abs.conv_states.new"][t]
            mag_rec_slot[idx[b]] = res["abs.recurrent_states"][t]
    res.update({"conv_state": conv_new, "recurrent_state": rec_new, "conv_states": conv_tok,
                "recurrent_states": rec_tok})
    if num.magnitudes:
        res.update({"abs.conv_state.new": mag_conv_slot, "abs.recurrent_state": mag_rec_slot})
    return res
