"""K3's sigmoid router with correction bias and grouped top-k (docs/k3-decode.md §5.2, §10.2-3).

Rules, each chosen so the oracle is deterministic where the kernels' behaviour is a convention:
- logits = x W_r^T are NOT rounded to bf16 ("route with fp32 logits"); float64 in exact mode.
- sc = sigmoid(logit); sel = sc + bias selects, the UNBIASED sc weights.
- Grouped top-k (general form, K3 itself uses one group): a group's score is the sum of its top-2
  sel; the `topk_group` best groups are kept, the others masked to -inf; then top-k.
- Ties go to the LOWER expert id (and lower group id): implemented with a stable descending sort,
  which keeps index order among equal keys.
- A NaN score selects as 0 [INFERRED, AMD README].
- weights = sc[ids] / sum(sc[ids]) (if renormalize) * routed_scaling_factor.

Forced routing (`forced_ids` [T, k], used to re-run downstream stages with a candidate's ids):
selection is skipped and the weights are computed from sc of the forced ids exactly as for a
normal route. A -1 slot is a dropped route: it is treated as an expert of score 0, so it gets
weight 0 and adds nothing to the renormalisation sum, and the combine simply skips it (§5.3, §10.2:
no second renormalisation step exists; the valid slots keep the weights the router gives them over
the valid ids). A row whose slots are all -1 gets all-zero weights (not NaN).

`sel_gap` [T] float64: the selection margin, sel(k-th) - sel((k+1)-th) among the experts left
after group masking (inf when nothing competes), and with n_group > topk_group also at most the
margin between the last kept and the first dropped group score. k3diff treats a small gap as a
near-tie in which a candidate may legitimately pick a different set.
"""
from __future__ import annotations

import torch

from .numerics import Numerics


def _stable_desc(x: torch.Tensor):
    return torch.sort(x, dim=-1, descending=True, stable=True)


def route(logits: torch.Tensor, bias: torch.Tensor, cfg, num: Numerics,
          forced_ids: torch.Tensor | None = None) -> dict:
    """logits [T, E] in the working dtype -> dict(topk_ids int32, topk_weights, sel_gap, scores)."""
    T, E = logits.shape
    k = cfg.top_k
    sc = torch.sigmoid(logits)
    sel = sc + bias.to(num.dtype)
    s = torch.where(torch.isnan(sel), torch.zeros_like(sel), sel)   # NaN selects as 0

    inf = torch.full((T,), float("inf"), dtype=torch.float64, device=logits.device)
    group_gap = inf
    if cfg.n_group > 1:
        G = cfg.n_group
        per = E // G
        top2 = _stable_desc(s.view(T, G, per))[0][..., :2].sum(-1)          # [T, G]
        gval, gorder = _stable_desc(top2)
        keep = torch.zeros(T, G, dtype=torch.bool, device=s.device)
        keep.scatter_(1, gorder[:, :cfg.topk_group], True)
        s = torch.where(keep.repeat_interleave(per, dim=1), s, torch.full_like(s, float("-inf")))
        if cfg.topk_group < G:
            group_gap = (gval[:, cfg.topk_group - 1] - gval[:, cfg.topk_group]).to(torch.float64)

    sval, order = _stable_desc(s)
    gap = (sval[:, k - 1] - sval[:, k]).to(torch.float64) if k < E else inf
    gap = torch.where(torch.isnan(gap), inf, gap)                        # -inf - -inf
    sel_gap = torch.minimum(gap, group_gap)

    if forced_ids is None:
        ids = order[:, :k]
    else:
        ids = forced_ids.to(device=logits.device, dtype=torch.int64)
        if ids.shape != (T, k):
            raise ValueError(f"forced_ids must have shape {(T, k)}, got {tuple(ids.shape)}")
        if bool(((ids < -1) | (ids >= E)).any()):
            raise ValueError(f"forced_ids must lie in [-1, {E}), got min {int(ids.min())} max {int(ids.max())}")
    valid = ids >= 0
    w = torch.gather(sc, 1, ids.clamp(min=0)) * valid                   # dropped slot: score 0
    if cfg.renormalize:
        tot = w.sum(-1, keepdim=True)
        w = torch.where(tot > 0, w / torch.where(tot > 0, tot, torch.ones_like(tot)), torch.zeros_like(w))
    w = w * cfg.routed_scaling_factor
    return {"topk_ids": ids.to(torch.int32), "topk_weights": w, "sel_gap": sel_gap, "scores": sc}
