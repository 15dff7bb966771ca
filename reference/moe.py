"""Stable LatentMoE (docs/k3-decode.md §5.1-5.4) and the dense SiTU MLP of layer 0 (§5.5).

Routed experts run in the latent space r: hl = bf16(x W_down^T); per selected expert
gu = hl W13_e^T, act = SiTU(gu), y_j = act W2_e^T; combine yc = bf16(sum_j w_j y_j) in f32;
yn = RMSNorm(yc); yu = bf16(yn W_up^T). The router and the merged shared experts see the full x;
the output is bf16(yu + ys).

Experts are given either as bf16 (`experts.w13` [E, 2I, r], `experts.w2` [E, r, I]) or as MXFP4
(`experts.w13_packed/_scale`, `experts.w2_packed/_scale`), detected by key names. Only the experts a
step routes to are read; they are dequantised exactly, a bounded group at a time (all 896
full-size experts at once would need ~240 GB in float64), and each group runs as one batched GEMM
over its tokens (padded per expert; the padding rows are computed and discarded). Every (token,
slot) result is the same product as one GEMM per expert: the batching only saves launches.

Faithful mode rounds act and y_j to bf16 [INFERRED, §5.6/§7]; exact mode rounds nothing.

With `num.magnitudes`, each accumulated output also comes as "abs.<name>" (numerics.py): a GEMV's
|x||W|^T; the combine's Σ_j |w_j||y_j|; a norm's |output| (its sum of squares has condition 1, so
the relative accumulation error of the norm is that of a positive sum); the final add the sum of its
two terms' magnitudes. topk_weights (ratios of sigmoids) is no accumulation: its "abs." is the logits' carried through the
ratio to first order (_weights_magnitude).
"""
from __future__ import annotations

import torch

from . import mxfp4
from .numerics import Numerics
from .router import route


def situ(gu: torch.Tensor, cfg) -> torch.Tensor:
    """SiTU over a [gate | up] pre-activation of width 2N (§5.1), in gu's dtype:
    (β tanh(g/β) σ(g)) · (β_lin tanh(u/β_lin))."""
    g, u = gu.chunk(2, dim=-1)
    b, bl = cfg.situ_beta, cfg.situ_linear_beta
    return (b * torch.tanh(g / b) * torch.sigmoid(g)) * (bl * torch.tanh(u / bl))


def expert_format(weights: dict) -> str:
    if "experts.w13_packed" in weights:
        return "mxfp4"
    if "experts.w13" in weights:
        return "bf16"
    raise KeyError("MoE weights hold neither experts.w13 (bf16) nor experts.w13_packed (MXFP4)")


# float64 expert weights dequantised at once, at most (about): 2^27 values = 1 GiB
GROUP_VALUES = 1 << 27


def experts(weights: dict, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(W13 [n, 2I, r], W2 [n, r, I]) of the experts `ids` as float64 values, dequantised if
    MXFP4 (exact)."""
    if expert_format(weights) == "mxfp4":
        w13 = mxfp4.dequantize(weights["experts.w13_packed"][ids], weights["experts.w13_scale"][ids], torch.float64)
        w2 = mxfp4.dequantize(weights["experts.w2_packed"][ids], weights["experts.w2_scale"][ids], torch.float64)
        return w13, w2
    return weights["experts.w13"][ids].to(torch.float64), weights["experts.w2"][ids].to(torch.float64)


def situ_mlp(x: torch.Tensor, gate_up: torch.Tensor, down: torch.Tensor, cfg, num: Numerics):
    """Shared experts / dense MLP: bf16(bf16(SiTU(bf16(x W_gu^T))) W_down^T). Returns (out, act,
    |act||W_down|^T or None without magnitudes)."""
    gu = num.round(num.linear(x, gate_up))
    act = num.round(situ(gu, cfg))
    mag = num.abs_linear(act, down) if num.magnitudes else None
    return num.round(num.linear(act, down)), act, mag


def routed_experts(hl: torch.Tensor, ids: torch.Tensor, w: torch.Tensor, weights: dict, cfg,
                   num: Numerics) -> torch.Tensor:
    """Expert-grouped evaluation: every token routed to expert e is processed in one GEMM, each
    (token, slot) result y_j lands in Y[t, j]; dropped slots (-1) stay 0. Returns the f32/f64
    weighted sum over slots (not yet rounded), and with magnitudes Σ_j |w_j||y_j| (else None)."""
    T, k = ids.shape
    r = hl.shape[-1]
    Y = torch.zeros(T, k, r, dtype=num.dtype, device=hl.device)
    ids64 = ids.long()
    t_idx, j_idx = (ids64 >= 0).nonzero(as_tuple=True)            # the routed (token, slot) pairs
    if t_idx.numel():
        e_of = ids64[t_idx, j_idx]
        # pairs sorted by expert; `row` = a pair's position among its expert's pairs
        e_of, order = torch.sort(e_of, stable=True)
        t_idx, j_idx = t_idx[order], j_idx[order]
        uniq, counts = torch.unique_consecutive(e_of, return_counts=True)
        starts = torch.cumsum(counts, 0) - counts
        slot = torch.repeat_interleave(torch.arange(len(uniq), device=hl.device), counts)
        row = torch.arange(len(e_of), device=hl.device) - starts[slot]
        per_expert = 3 * cfg.moe_intermediate * r                 # values of W13_e and W2_e
        group = max(1, GROUP_VALUES // per_expert)
        counts_l = counts.tolist()
        for g0 in range(0, len(uniq), group):
            g1 = min(g0 + group, len(uniq))
            w13, w2 = experts(weights, uniq[g0:g1])
            sel = (slot >= g0) & (slot < g1)
            s, rw = slot[sel] - g0, row[sel]
            H = torch.zeros(g1 - g0, max(counts_l[g0:g1]), r, dtype=hl.dtype, device=hl.device)
            H[s, rw] = hl[t_idx[sel]]                                  # padded token rows per expert
            act = num.round(situ(num.mm(H, w13.transpose(1, 2)), cfg))  # act → bf16 [INFERRED]
            y = num.round(num.mm(act, w2.transpose(1, 2)))             # y_j → bf16 [INFERRED]
            Y[t_idx[sel], j_idx[sel]] = y[s, rw]
    w = w.to(num.dtype).unsqueeze(-1)
    mag = (Y.abs() * w.abs()).sum(dim=1) if num.magnitudes else None
    return (Y * w).sum(dim=1), mag


def latent_moe(x: torch.Tensor, weights: dict, cfg, num: Numerics,
               forced_ids: torch.Tensor | None = None) -> dict:
    """x [T, d] (working dtype) -> dict of the §5 intermediates and `out` (working dtype)."""
    logits = num.linear(x, weights["router.weight"])                  # f32/f64, never rounded
    r = route(logits, weights["router.bias"], cfg, num, forced_ids)
    hl = num.round(num.linear(x, weights["down.weight"]))
    combined, mag_yc = routed_experts(hl, r["topk_ids"], r["topk_weights"], weights, cfg, num)
    yc = num.round(combined)
    yn = num.rmsnorm(yc, weights["latent_norm.weight"], cfg.rms_eps)
    yu = num.round(num.linear(yn, weights["up.weight"]))
    ys, _, mag_ys = situ_mlp(x, weights["shared.gate_up"], weights["shared.down"], cfg, num)
    out = num.round(yu + ys)
    res = {"out": out, "router_logits": logits, "topk_ids": r["topk_ids"],
           "topk_weights": r["topk_weights"], "latent": hl, "combined": yc, "latent_normed": yn,
           "routed_out": yu, "shared_out": ys, "sel_gap": r["sel_gap"]}
    if num.magnitudes:
        mag_yu = num.abs_linear(yn, weights["up.weight"])
        mag_logits = num.abs_linear(x, weights["router.weight"])
        res.update({"abs.router_logits": mag_logits,
                    "abs.topk_weights": _weights_magnitude(logits, mag_logits, r["topk_ids"], cfg),
                    "abs.latent": num.abs_linear(x, weights["down.weight"]), "abs.combined": mag_yc,
                    "abs.latent_normed": yn.abs(), "abs.routed_out": mag_yu, "abs.shared_out": mag_ys,
                    "abs.out": mag_yu + mag_ys})
    return res


def _weights_magnitude(logits, mag_logits, ids, cfg):
    """topk_weights is no accumulation, but it inherits the logits' accumulation error: the first-order
    propagation of a logit error proportional to Σ|x||w_r| through w_j = rsf·σ(l_j)/Σ_i σ(l_i)
    (Σ over the selected ids), so a floor c·u·this is the one the logits get, carried to the weights:
    rsf·(σ'(l_j)A_j/S + σ(l_j)/S²·Σ_i σ'(l_i)A_i), or rsf·σ'(l_j)A_j without renormalisation."""
    sc = torch.sigmoid(logits.to(torch.float64))
    valid = ids.long() >= 0
    at = ids.long().clamp(min=0)
    s_sel = torch.gather(sc, 1, at) * valid
    g_sel = torch.gather(sc * (1 - sc) * mag_logits.to(torch.float64), 1, at) * valid
    if not cfg.renormalize:
        return cfg.routed_scaling_factor * g_sel
    tot = s_sel.sum(-1, keepdim=True)
    safe = torch.where(tot > 0, tot, torch.ones_like(tot))
    mag = g_sel / safe + s_sel / safe ** 2 * g_sel.sum(-1, keepdim=True)
    return cfg.routed_scaling_factor * torch.where(tot > 0, mag, torch.zeros_like(mag)) * valid


def dense_mlp(x: torch.Tensor, weights: dict, cfg, num: Numerics) -> dict:
    """Layer 0's dense SiTU MLP (§5.5)."""
    out, act, mag = situ_mlp(x, weights["dense.gate_up"], weights["dense.down"], cfg, num)
    res = {"out": out, "dense_act": act}
    if num.magnitudes:
        res["abs.out"] = mag
    return res
