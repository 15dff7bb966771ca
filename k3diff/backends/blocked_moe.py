"""LatentMoE (docs/k3-decode.md §5) and the dense SiTU MLP for the `torch-blocked` backend.

Kernel-like layout: router GEMV with f32 logits, sort-based top-k, then an (expert -> tokens)
schedule so every touched expert runs once over all its tokens, split-K GEMMs, f32 combine.
"""
from __future__ import annotations

import torch

from .blocked_ops import F32, bf16, canonical_sel, gemm, grouped_topk, mxfp4_dequant, rmsnorm_bf16, sigmoid, situ


def _get(w: dict, name: str):
    """Weight lookup tolerant to a '.weight' suffix being present or not."""
    for key in (name, name + ".weight", name.removesuffix(".weight")):
        if key in w:
            return w[key]
    return None


class _Dequantised:
    """MXFP4 experts read as bf16 one expert at a time, when a step uses it (`experts[e]`): the
    same bits as dequantising every expert up front (E2M1 x E8M0 is exact in bf16), without a bf16
    copy of all of them held beside the packed weights (59 GB at K3's 896 experts: the candidate's
    process then could not hold a full-dims MXFP4 case on an 80 GB card beside k3diff's)."""

    def __init__(self, packed: torch.Tensor, scale: torch.Tensor):
        self.packed, self.scale = packed, scale     # the weights as given (read-only views)

    def __getitem__(self, e: int) -> torch.Tensor:
        return mxfp4_dequant(self.packed[e], self.scale[e]).to(torch.bfloat16)   # exact: bf16 as before


def prepare_moe(cfg, w: dict) -> dict:
    """MXFP4 experts dequantised per expert as a step reaches them (`_Dequantised`); bf16 as given."""
    if _get(w, "experts.w13_packed") is not None:
        w13 = _Dequantised(_get(w, "experts.w13_packed"), _get(w, "experts.w13_scale"))
        w2 = _Dequantised(_get(w, "experts.w2_packed"), _get(w, "experts.w2_scale"))
    else:
        w13, w2 = _get(w, "experts.w13"), _get(w, "experts.w2")
    return {
        "router": _get(w, "router.weight"), "bias": _get(w, "router.bias"),
        "down": _get(w, "down.weight"), "norm": _get(w, "latent_norm.weight"), "up": _get(w, "up.weight"),
        "sh_gu": _get(w, "shared.gate_up"), "sh_down": _get(w, "shared.down"),
        "w13": w13, "w2": w2,
    }


def prepare_dense(cfg, w: dict) -> dict:
    return {"gu": _get(w, "dense.gate_up"), "down": _get(w, "dense.down")}


def glu_mlp(cfg, x: torch.Tensor, w_gu: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """Shared-expert / dense MLP (§5.4/5.5): gate_up -> bf16, SiTU -> bf16, down -> bf16."""
    n = w_gu.shape[0] // 2
    gu = bf16(gemm(x, w_gu))
    act = bf16(situ(gu[:, :n], gu[:, n:], cfg.situ_beta, cfg.situ_linear_beta))
    return bf16(gemm(act, w_down))


def route(cfg, logits: torch.Tensor, bias: torch.Tensor, forced_ids=None):
    """Router (§5.2) -> (ids int64 [T,k], weights f32 [T,k]).

    Weights use the unbiased sigmoid scores, renormalised over the routes that exist, times
    routed_scaling_factor. With forced ids, -1 marks a dropped route: it has no score, so it is
    left out of the one normalisation, gets weight 0 and contributes nothing (§5.3, §10.2); the
    others are not renormalised again after the drop."""
    sc = sigmoid(logits)
    if forced_ids is None:
        sel = canonical_sel(sc + bias.to(F32))
        ids = grouped_topk(sel, cfg.top_k, cfg.n_group, cfg.topk_group)
    else:
        ids = forced_ids.to(torch.int64)
    valid = ids >= 0
    picked = torch.where(valid, torch.gather(sc, 1, ids.clamp(min=0)), torch.zeros((), dtype=F32, device=sc.device))
    if cfg.renormalize:
        total = picked.sum(dim=-1, keepdim=True)
        # a token whose routes were all dropped has nothing to normalise: its weights stay 0
        picked = torch.where(total > 0, picked / torch.where(total > 0, total, torch.ones_like(total)), picked)
    return ids, picked * cfg.routed_scaling_factor


def combine(wts: torch.Tensor, y_routes: torch.Tensor) -> torch.Tensor:
    """The f32 weighted combine sum_j w_j y_j [T, r] in slot order (rounded by the caller)."""
    acc = torch.zeros(y_routes.shape[0], y_routes.shape[2], dtype=F32, device=y_routes.device)
    for j in range(y_routes.shape[1]):
        acc = acc + wts[:, j:j + 1] * y_routes[:, j]
    return acc


def run_moe(cfg, p: dict, x: torch.Tensor, forced_ids=None) -> dict:
    T, k = x.shape[0], cfg.top_k
    r, I = cfg.latent_dim, cfg.moe_intermediate
    # router: bf16 x bf16 -> f32 logits, never rounded
    logits = gemm(x, p["router"])
    ids, wts = route(cfg, logits, p["bias"], forced_ids)

    # latent down-projection (rounded: hl is what the experts read)
    hl = bf16(gemm(x, p["down"]))

    # (expert -> token list) schedule: sort the valid (token, slot) routes by expert id
    flat = ids.reshape(-1)
    routes = torch.nonzero(flat >= 0).squeeze(1)
    order = torch.sort(flat[routes], stable=True).indices
    routes = routes[order]
    experts, counts = torch.unique_consecutive(flat[routes], return_counts=True)
    y_routes = torch.zeros(T * k, r, dtype=F32, device=x.device)   # y_j per (token, slot); 0 if dropped
    start = 0
    for e, c in zip(experts.tolist(), counts.tolist()):
        pos = routes[start:start + c]
        start += c
        h = hl[pos // k]                                            # this expert's tokens
        gu = gemm(h, p["w13"][e])                                   # f32, not rounded
        act = bf16(situ(gu[:, :I], gu[:, I:], cfg.situ_beta, cfg.situ_linear_beta))
        y_routes[pos] = bf16(gemm(act, p["w2"][e])).to(F32)         # y_j rounded (§5.6 faithful)
    y_routes = y_routes.view(T, k, r)

    combined = bf16(combine(wts, y_routes))
    normed = rmsnorm_bf16(combined, p["norm"], cfg.rms_eps)
    routed = bf16(gemm(normed, p["up"]))

    if p["sh_gu"] is not None:
        shared = glu_mlp(cfg, x, p["sh_gu"], p["sh_down"])
    else:                                                           # n_shared == 0
        shared = torch.zeros_like(routed)
    out = bf16(routed.to(F32) + shared.to(F32))
    return {"out": out, "router_logits": logits, "topk_ids": ids.to(torch.int32), "topk_weights": wts,
            "latent": hl, "combined": combined, "latent_normed": normed, "routed_out": routed,
            "shared_out": shared}
