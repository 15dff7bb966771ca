"""Softmax-stressing score distributions of an MLA case (the case's `scores`; docs/k3-decode.md
§14.4): the cached rows of each sequence are redrawn so that the scores its first token gives them
take chosen values, where a kernel's softmax is most fragile:

  far_negative  every cached row's score about -200 (below any exp's range: the running max and
                the rescaling must carry the step; the new rows keep their natural scores)
  dominant      one cached row about 40 above the others (its probability ~1, the rest ~e^-40)
  equal         every cached row the same (all scores of a head equal: ties in the max, a flat
                softmax)
  underflow     cached scores in [-104, -88] below the new rows' (their exponentials underflow
                in f32, some to subnormals: flush-to-zero and the partials' merge show)

A row c with scores t per head solves S c = t, S = scale·[ql | q_pe] of the token (H x (R+rope)):
c = pinv(S) t plus a random part in S's null space (rows stay varied), then rounded to bf16 (the
scores move by its rounding only). Rows are drawn from the case seed; an FP8 cache stores them
quantised (reference.fp8_cache), as a kernel would have written them.
"""
from __future__ import annotations

import torch

from reference import fp8_cache
from reference import materialize as ref_mat
from reference.mla import mla_query

FAR_NEGATIVE, DOMINANT_GAP, UNDERFLOW = -200.0, 40.0, (-104.0, -88.0)


def _targets(mode: str, L: int, H: int, gen) -> torch.Tensor:
    """[L, H] scores for a sequence's L cached rows (`equal` is handled by copying one row)."""
    if mode == "far_negative":
        return FAR_NEGATIVE + torch.rand(L, H, generator=gen, dtype=torch.float64)
    if mode == "underflow":
        lo, hi = UNDERFLOW
        return lo + (hi - lo) * torch.rand(L, H, generator=gen, dtype=torch.float64)
    t = torch.randn(L, H, generator=gen, dtype=torch.float64)         # dominant: natural scores ...
    t[int(torch.randint(0, L, (1,), generator=gen))] += DOMINANT_GAP  # ... and one far above
    return t


def apply_scores(case, cfg, weights: dict, inputs: dict) -> None:
    """Redraw the cached rows (< L_b) of `inputs["kv_cache"]` in place for case.scores."""
    if case.scores == "natural":
        return
    cache, lens = inputs["kv_cache"], inputs["cache_lens"].tolist()
    widths = inputs["query_lens"].tolist() if "query_lens" in inputs else [1] * len(lens)
    first = [sum(widths[:b]) for b in range(len(widths))]
    S = mla_query(inputs["x"][first].cpu(), {k: v.cpu() for k, v in weights.items()}, cfg)   # [B, H, C]
    gen = torch.Generator().manual_seed(ref_mat._seed(case.seed, "score_mode", case.scores))
    C = cfg.mla_cache_dim
    for b, L in enumerate(lens):
        if L == 0:
            continue
        if case.scores == "equal":
            rows = torch.randn(1, C, generator=gen, dtype=torch.float64).expand(L, C)
        else:
            pinv = torch.linalg.pinv(S[b])                                   # [C, H]
            noise = torch.randn(L, C, generator=gen, dtype=torch.float64)
            free = noise - noise @ (pinv @ S[b])                         # off S's row space
            rows = _targets(case.scores, L, S.shape[1], gen) @ pinv.T + free
        rows = rows.to(torch.bfloat16)
        if cache.dtype == torch.uint8:
            R = cfg.kv_lora_rank
            cache[b, :L] = fp8_cache.quantise(rows[:, :R], rows[:, R:], cfg, exact=False).to(cache.device)
        else:
            cache[b, :L] = rows.to(cache.device)
